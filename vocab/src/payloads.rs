//! How a payload is shown to people (issue 37): its codec's name, what kind of bytes it holds
//! (JSON, text, an image, other bytes) and a one-line preview. The store never interprets a
//! payload; the CLI's `tree` and the server's web console do, and describe it the same way
//! from this one definition.

/// Names of the caller codec tags, for humans (the store never interprets them).
pub const CODEC_NAMES: [(&str, u32); 9] = [
    ("raw", 0),
    ("json", 1),
    ("protobuf", 2),
    ("cbor", 3),
    ("msgpack", 4),
    ("text", 5),
    ("flatbuffers", 6),
    ("capnp", 7),
    ("gob", 8),
];

/// The codec tag of JSON payloads.
pub const CODEC_JSON: u32 = 1;
/// The codec tag of text payloads.
pub const CODEC_TEXT: u32 = 5;

/// A codec tag → its name (or the number as text).
pub fn codec_name(tag: u32) -> String {
    CODEC_NAMES
        .iter()
        .find(|(_, known)| *known == tag)
        .map_or_else(|| tag.to_string(), |(name, _)| name.to_string())
}

/// What a payload holds, as far as a viewer cares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PayloadKind {
    /// UTF-8 that the codec says is JSON, or that starts like a JSON object or array.
    Json,
    /// Other UTF-8 text.
    Text,
    /// A raster image a browser shows (PNG, JPEG, GIF, WebP), by its magic bytes; the media
    /// type. Never SVG: an SVG document can carry script.
    Image(&'static str),
    /// Anything else: shown as its codec and size, never as text.
    Binary,
}

impl PayloadKind {
    /// Classifies `prefix`, the payload's first bytes (or all of them): a prefix cut inside
    /// a UTF-8 character still counts as text.
    pub fn of(codec: u32, prefix: &[u8]) -> PayloadKind {
        if let Some(media_type) = image_media_type(prefix) {
            return PayloadKind::Image(media_type);
        }
        let text = match std::str::from_utf8(prefix) {
            Ok(text) => text,
            // Cut inside a character at the end: the part before it decides.
            Err(error) if error.error_len().is_none() => {
                std::str::from_utf8(&prefix[..error.valid_up_to()]).unwrap_or_default()
            }
            Err(_) => return PayloadKind::Binary,
        };
        let starts_like_json = matches!(text.trim_start().chars().next(), Some('{' | '['));
        if codec == CODEC_JSON || (codec != CODEC_TEXT && starts_like_json) {
            PayloadKind::Json
        } else {
            PayloadKind::Text
        }
    }

    /// `json`, `text`, `image` or `binary`: the name the console's API and `tree --json` use.
    pub fn name(self) -> &'static str {
        match self {
            PayloadKind::Json => "json",
            PayloadKind::Text => "text",
            PayloadKind::Image(_) => "image",
            PayloadKind::Binary => "binary",
        }
    }
}

/// The media type of a raster image by its magic bytes, else `None`.
pub fn image_media_type(bytes: &[u8]) -> Option<&'static str> {
    const SIGNATURES: [(&[u8], &str); 5] = [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"RIFF", "image/webp"),
    ];
    SIGNATURES
        .iter()
        .find(|(magic, media_type)| {
            bytes.starts_with(magic)
                && (*media_type != "image/webp" || bytes.get(8..12) == Some(b"WEBP"))
        })
        .map(|(_, media_type)| *media_type)
}

/// A byte count for people: `512 B`, `1.5 KiB`, `16.0 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A one-line preview of at most `chars_max` characters: text and JSON with every run of
/// whitespace as one space and every control character (terminal escapes included) shown as
/// `\u{..}` so that printing it can never drive a terminal; `…` marks a cut. Images and other
/// bytes: their kind, codec and size (`payload_len`: the whole payload's length, of which
/// `prefix` may be the start).
pub fn one_line_preview(codec: u32, prefix: &[u8], payload_len: u64, chars_max: usize) -> String {
    let kind = PayloadKind::of(codec, prefix);
    let text = match kind {
        PayloadKind::Json | PayloadKind::Text => String::from_utf8_lossy(prefix),
        PayloadKind::Image(media_type) => {
            return format!("{media_type}, {}", human_bytes(payload_len));
        }
        PayloadKind::Binary => {
            return format!("binary {}, {}", codec_name(codec), human_bytes(payload_len));
        }
    };
    let mut line = String::new();
    let mut chars = 0;
    let mut last_was_space = false;
    let mut cut = (prefix.len() as u64) < payload_len;
    for character in text.trim().chars() {
        if chars >= chars_max {
            cut = true;
            break;
        }
        if character.is_whitespace() {
            if !last_was_space {
                line.push(' ');
                chars += 1;
            }
            last_was_space = true;
            continue;
        }
        last_was_space = false;
        if character.is_control() || is_bidi_control(character) {
            let escaped = format!("\\u{{{:x}}}", u32::from(character));
            chars += escaped.chars().count();
            line.push_str(&escaped);
        } else {
            line.push(character);
            chars += 1;
        }
    }
    if cut {
        line.push('…');
    }
    line
}

/// Characters that reorder the text around them on a terminal (Trojan Source): escaped too.
fn is_bidi_control(character: char) -> bool {
    matches!(character, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_codec_and_bytes() {
        assert_eq!(PayloadKind::of(CODEC_JSON, b"{\"a\":1}"), PayloadKind::Json);
        assert_eq!(PayloadKind::of(0, b"  [1,2]"), PayloadKind::Json);
        assert_eq!(PayloadKind::of(CODEC_TEXT, b"{not json"), PayloadKind::Text);
        assert_eq!(PayloadKind::of(0, "héllo".as_bytes()), PayloadKind::Text);
        // Cut inside the two bytes of 'é': still text.
        assert_eq!(PayloadKind::of(0, &"hé".as_bytes()[..2]), PayloadKind::Text);
        assert_eq!(PayloadKind::of(0, b"\xff\xfe\x00"), PayloadKind::Binary);
        assert_eq!(
            PayloadKind::of(0, b"\x89PNG\r\n\x1a\nrest"),
            PayloadKind::Image("image/png")
        );
        assert_eq!(
            PayloadKind::of(0, b"RIFF\0\0\0\0WEBPVP8 "),
            PayloadKind::Image("image/webp")
        );
        assert_eq!(PayloadKind::of(0, b"RIFF\0\0\0\0WAVE"), PayloadKind::Text);
        assert_eq!(image_media_type(b"<svg onload=alert(1)>"), None);
    }

    #[test]
    fn previews_are_one_line_and_never_carry_control_characters() {
        assert_eq!(
            one_line_preview(CODEC_JSON, b"{\n  \"role\": \"user\"\n}", 20, 60),
            "{ \"role\": \"user\" }"
        );
        let hostile = b"hi \x1b]0;owned\x07 \x1b[2J\rdone \xe2\x80\xae";
        let line = one_line_preview(CODEC_TEXT, hostile, hostile.len() as u64, 80);
        assert!(
            line.chars().all(|c| !c.is_control() && !is_bidi_control(c)),
            "{line:?}"
        );
        assert!(
            line.contains("\\u{1b}") && line.contains("\\u{202e}"),
            "{line:?}"
        );
        assert_eq!(one_line_preview(CODEC_TEXT, b"abcdef", 6, 3), "abc…");
        assert_eq!(one_line_preview(CODEC_TEXT, b"abc", 1000, 10), "abc…");
        assert_eq!(
            one_line_preview(0, b"\x00\x01\xff", 3000, 10),
            "binary raw, 2.9 KiB"
        );
        assert_eq!(
            one_line_preview(0, b"\x89PNG\r\n\x1a\n", 100, 10),
            "image/png, 100 B"
        );
    }

    #[test]
    fn codec_names_and_sizes() {
        assert_eq!(codec_name(1), "json");
        assert_eq!(codec_name(99), "99");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(16 * 1024 * 1024), "16.0 MiB");
    }
}
