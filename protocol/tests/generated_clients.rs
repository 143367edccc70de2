//! The Python and TypeScript clients' wire constants are generated from the Rust message table
//! (`protocol/src/message.rs`), the error codes (`protocol/src/error.rs`) and the shared limits
//! (`vocab/src/limits.rs`), and checked in: `clients/python/ctxstore/_wire.py` and
//! `clients/typescript/src/wire.ts`. This test renders both and fails when a checked-in file
//! differs from what the Rust side says today, so a message, a code or a limit cannot drift
//! between the three languages (as rust-analyzer checks its generated syntax kinds in).
//!
//! After changing the table, an error code or a limit, write the files anew and commit them:
//! `CTXSTORE_UPDATE_GENERATED=1 cargo test -p ctxstore-protocol --test generated_clients`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ctxstore_protocol::frame::FRAME_BYTES_LIMIT;
use ctxstore_protocol::{
    ERROR_TYPE, ErrorCode, HEADER_BYTES, LIST_ITEMS_LIMIT, MESSAGE_BYTES_MAX, MessageType,
    NAME_BYTES_MAX, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, RESPONSE_BIT,
};
use ctxstore_vocab::limits as vocab;

/// The constants both clients get, by name, with what each means.
fn constants() -> Vec<(&'static str, u64, &'static str)> {
    vec![
        (
            "PROTOCOL_VERSION",
            PROTOCOL_VERSION.into(),
            "The newest protocol version spoken.",
        ),
        (
            "PROTOCOL_VERSION_MIN",
            PROTOCOL_VERSION_MIN.into(),
            "The oldest protocol version spoken.",
        ),
        (
            "HEADER_BYTES",
            HEADER_BYTES as u64,
            "Bytes of a frame header.",
        ),
        (
            "FRAME_BYTES_LIMIT",
            FRAME_BYTES_LIMIT.into(),
            "Hard ceiling of any frame body.",
        ),
        (
            "RESPONSE_BIT",
            RESPONSE_BIT.into(),
            "A response's type is its request's with this bit.",
        ),
        (
            "ERROR_TYPE",
            ERROR_TYPE.into(),
            "The message type of an ERROR answer.",
        ),
        (
            "TOKEN_BYTES_MAX",
            vocab::TOKEN_BYTES_MAX as u64,
            "Bytes of a HELLO token.",
        ),
        (
            "NAME_BYTES_MAX",
            NAME_BYTES_MAX as u64,
            "Bytes of a name on the wire (a client's, a server's).",
        ),
        (
            "MESSAGE_BYTES_MAX",
            MESSAGE_BYTES_MAX as u64,
            "Bytes of an ERROR answer's message.",
        ),
        (
            "LIST_ITEMS_LIMIT",
            LIST_ITEMS_LIMIT.into(),
            "Hard ceiling of the items of any list in an answer.",
        ),
        (
            "CONTEXT_NAME_BYTES_MAX",
            vocab::CONTEXT_NAME_BYTES_MAX as u64,
            "Bytes of a context's name.",
        ),
        (
            "TAGS_PER_CONTEXT_MAX",
            vocab::TAGS_PER_CONTEXT_MAX as u64,
            "Tags a context may carry.",
        ),
        (
            "TAG_KEY_BYTES_MAX",
            vocab::TAG_KEY_BYTES_MAX as u64,
            "Bytes of a tag's key.",
        ),
        (
            "TAG_VALUE_BYTES_MAX",
            vocab::TAG_VALUE_BYTES_MAX as u64,
            "Bytes of a tag's value.",
        ),
        (
            "KV_KEY_BYTES_MAX",
            vocab::KV_KEY_BYTES_MAX as u64,
            "Bytes of a key-value key.",
        ),
        (
            "KV_ENTRIES_PER_REQUEST_MAX",
            vocab::KV_ENTRIES_PER_REQUEST_MAX as u64,
            "Entries of one KV_PUT.",
        ),
        (
            "KV_TOUCH_KEYS_MAX",
            vocab::KV_TOUCH_KEYS_MAX as u64,
            "Keys of one KV_TOUCH.",
        ),
        (
            "KV_PAGE_MAX",
            vocab::KV_PAGE_MAX.into(),
            "Entries of one KV_LIST page.",
        ),
        (
            "CONTEXT_PAGE_MAX",
            vocab::CONTEXT_PAGE_MAX.into(),
            "Contexts of one CTX_LIST page.",
        ),
        (
            "TURN_KEY_BYTES_MAX",
            vocab::TURN_KEY_BYTES_MAX as u64,
            "Bytes of a turn's key.",
        ),
        (
            "LABELS_PER_TURN_MAX",
            vocab::LABELS_PER_TURN_MAX as u64,
            "Labels of one turn.",
        ),
        (
            "LABEL_KEY_BYTES_MAX",
            vocab::LABEL_KEY_BYTES_MAX as u64,
            "Bytes of a label's key.",
        ),
        (
            "LABELS_BYTES_MAX",
            vocab::LABELS_BYTES_MAX as u64,
            "Bytes of a turn's labels together.",
        ),
        (
            "LINKS_PER_TURN_MAX",
            vocab::LINKS_PER_TURN_MAX as u64,
            "Links of one turn.",
        ),
        (
            "APPEND_BATCH_TURNS_MAX",
            vocab::APPEND_BATCH_TURNS_MAX as u64,
            "Turns of one APPEND_TURNS.",
        ),
        (
            "LOG_PAGE_MAX",
            vocab::LOG_PAGE_MAX.into(),
            "Turns of one TURN_LOG page.",
        ),
        (
            "LOG_SCAN_MAX",
            vocab::LOG_SCAN_MAX.into(),
            "Records one TURN_LOG scans.",
        ),
        (
            "FIND_PAGE_MAX",
            vocab::FIND_PAGE_MAX.into(),
            "Turns of one FIND_TURNS page.",
        ),
        (
            "CHUNKS_PER_PAYLOAD_MAX",
            vocab::CHUNKS_PER_PAYLOAD_MAX.into(),
            "Chunks of one PUT_CHUNKED payload.",
        ),
        (
            "CHUNK_BYTES_MAX",
            vocab::CHUNK_BYTES_MAX.into(),
            "Bytes of one chunk.",
        ),
        (
            "TTL_MS_MAX",
            vocab::TTL_MS_MAX,
            "The longest time to live, in milliseconds (100 years).",
        ),
    ]
}

const HEADER_NOTE: &str = "Generated from the Rust message table (protocol/src/message.rs), the \
error codes (protocol/src/error.rs) and the shared limits (vocab/src/limits.rs) by \
protocol/tests/generated_clients.rs. Do not edit: change the Rust side, then run \
CTXSTORE_UPDATE_GENERATED=1 cargo test -p ctxstore-protocol --test generated_clients.";

fn python() -> String {
    let mut out = String::new();
    writeln!(out, "# {}", wrapped(HEADER_NOTE, "# ")).unwrap();
    out.push_str(
        "\"\"\"The wire's message codes, versions, error codes and shared limits.\"\"\"\n\n",
    );
    out.push_str("from __future__ import annotations\n\nfrom enum import IntEnum\n\n");
    for (name, value, doc) in constants() {
        writeln!(out, "{name} = {value}\n\"\"\"{doc}\"\"\"").unwrap();
    }
    out.push_str("\n\nclass MessageType(IntEnum):\n");
    out.push_str("    \"\"\"Request types; a response has ``request | RESPONSE_BIT``, ERROR is ERROR_TYPE.\"\"\"\n\n");
    for message in MessageType::ALL {
        writeln!(out, "    {} = 0x{:04X}", message.name(), message.code()).unwrap();
    }
    out.push_str(
        "\n    @property\n    def response_type(self) -> int:\n        \
         \"\"\"The ``msg_type`` of this request's response frame.\"\"\"\n        \
         return int(self) | RESPONSE_BIT\n\n    \
         @property\n    def since_version(self) -> int:\n        \
         \"\"\"The protocol version that introduced this message.\"\"\"\n        \
         return SINCE_VERSION[self]\n\n    \
         @property\n    def family(self) -> str:\n        \
         \"\"\"The family that owns the message's body.\"\"\"\n        \
         return FAMILY[self]\n",
    );
    out.push_str("\n\nSINCE_VERSION: dict[int, int] = {\n");
    for message in MessageType::ALL {
        writeln!(
            out,
            "    MessageType.{}: {},",
            message.name(),
            message.since_version()
        )
        .unwrap();
    }
    out.push_str("}\n\"\"\"The protocol version each message arrived in.\"\"\"\n");
    out.push_str("\nFAMILY: dict[int, str] = {\n");
    for message in MessageType::ALL {
        writeln!(
            out,
            "    MessageType.{}: \"{}\",",
            message.name(),
            message.family()
        )
        .unwrap();
    }
    out.push_str("}\n\"\"\"The family (codec module) of each message.\"\"\"\n");
    out.push_str(
        "\n\nclass ErrorCode(IntEnum):\n    \"\"\"The ERROR answer's stable codes.\"\"\"\n\n",
    );
    for code in ErrorCode::ALL {
        writeln!(out, "    {} = {}", code.name(), code.code()).unwrap();
    }
    out
}

fn typescript() -> String {
    let mut out = String::new();
    writeln!(out, "// {}", wrapped(HEADER_NOTE, "// ")).unwrap();
    out.push_str("\n/** The wire's message codes, versions, error codes and shared limits. */\n\n");
    for (name, value, doc) in constants() {
        let literal = if value > (1 << 53) {
            panic!("{name} = {value} does not fit a JavaScript number exactly")
        } else {
            value.to_string()
        };
        writeln!(out, "/** {doc} */\nexport const {name} = {literal};").unwrap();
    }
    out.push_str(
        "\n/** Request types; a response has `request | RESPONSE_BIT`, ERROR is ERROR_TYPE. */\n",
    );
    out.push_str("export const MessageType = {\n");
    for message in MessageType::ALL {
        writeln!(out, "  {}: 0x{:04x},", message.name(), message.code()).unwrap();
    }
    out.push_str("} as const;\n\n/** The protocol version each message arrived in. */\n");
    out.push_str("export const SINCE_VERSION: ReadonlyMap<number, number> = new Map([\n");
    for message in MessageType::ALL {
        writeln!(
            out,
            "  [MessageType.{}, {}],",
            message.name(),
            message.since_version()
        )
        .unwrap();
    }
    out.push_str("]);\n\n/** The family (codec module) of each message. */\n");
    out.push_str("export const FAMILY: ReadonlyMap<number, string> = new Map([\n");
    for message in MessageType::ALL {
        writeln!(
            out,
            "  [MessageType.{}, \"{}\"],",
            message.name(),
            message.family()
        )
        .unwrap();
    }
    out.push_str("]);\n\n/** The ERROR answer's stable codes. */\nexport const ErrorCode = {\n");
    for code in ErrorCode::ALL {
        writeln!(out, "  {}: {},", code.name(), code.code()).unwrap();
    }
    out.push_str("} as const;\n");
    out
}

/// The header note broken into lines of at most 96 characters, each after the first led by
/// `lead`.
fn wrapped(text: &str, lead: &str) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split(' ') {
        let line = lines.last_mut().unwrap();
        if !line.is_empty() && line.len() + word.len() + 1 + lead.len() > 96 {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join(&format!("\n{lead}"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn check(relative: &str, expected: &str) {
    let path = repo_root().join(relative);
    if std::env::var_os("CTXSTORE_UPDATE_GENERATED").is_some() {
        std::fs::write(&path, expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{relative} is stale: it no longer says what the Rust message table, error codes and \
         limits say. Write it anew with \
         `CTXSTORE_UPDATE_GENERATED=1 cargo test -p ctxstore-protocol --test generated_clients` \
         and commit it."
    );
}

#[test]
fn the_python_clients_wire_constants_are_generated_from_the_table() {
    check("clients/python/ctxstore/_wire.py", &python());
}

#[test]
fn the_typescript_clients_wire_constants_are_generated_from_the_table() {
    check("clients/typescript/src/wire.ts", &typescript());
}

/// The table itself: codes unique, requests below the response bit, names unique, versions
/// within the ones spoken, every family named.
#[test]
fn the_message_table_is_consistent() {
    let mut codes = std::collections::BTreeSet::new();
    let mut names = std::collections::BTreeSet::new();
    for message in MessageType::ALL {
        assert!(
            codes.insert(message.code()),
            "{} repeats a code",
            message.name()
        );
        assert!(
            names.insert(message.name()),
            "{} repeats a name",
            message.name()
        );
        assert!((1..=0x00FF).contains(&message.code()), "{}", message.name());
        assert!(
            (PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&message.since_version()),
            "{}",
            message.name()
        );
        assert_eq!(MessageType::from_code(message.code()), Some(message));
    }
}
