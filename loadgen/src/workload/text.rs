//! Chat-like payloads for benchmarks: JSON messages whose content is prose over a Zipf-
//! distributed vocabulary, with numbers, identifiers and code, so that zstd level 1 compresses
//! them about as well as real agent transcripts (≈ 2.4×, brief §8), and no two are alike.

use std::sync::OnceLock;

const VOCABULARY_WORDS: usize = 4000;
const SYLLABLES: [&str; 48] = [
    "ka", "lo", "mi", "ne", "ra", "to", "vi", "su", "pe", "da", "ge", "fo", "ba", "ri", "ul", "an",
    "er", "in", "on", "us", "ex", "at", "or", "em", "qua", "tri", "str", "con", "pro", "ment",
    "tion", "ing", "ble", "ter", "ver", "sch", "dat", "fil", "log", "req", "res", "ctx", "api",
    "val", "key", "arg", "opt", "cfg",
];

struct Vocabulary {
    words: Vec<String>,
    /// Cumulative Zipf weights scaled to u64, for sampling by binary search.
    cumulative: Vec<u64>,
}

fn vocabulary() -> &'static Vocabulary {
    static VOCABULARY: OnceLock<Vocabulary> = OnceLock::new();
    VOCABULARY.get_or_init(|| {
        let mut rng = Rng::new(0x005e_ed0f_c0de);
        let words = (0..VOCABULARY_WORDS)
            .map(|_| {
                let syllables = 1 + rng.below(4) as usize;
                (0..syllables)
                    .map(|_| SYLLABLES[rng.below(SYLLABLES.len() as u64) as usize])
                    .collect()
            })
            .collect();
        let weights: Vec<f64> = (1..=VOCABULARY_WORDS)
            .map(|rank| 1.0 / (rank as f64).powf(1.05))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut running = 0.0;
        let cumulative = weights
            .iter()
            .map(|weight| {
                running += weight / total;
                (running.min(1.0) * u64::MAX as f64) as u64
            })
            .collect();
        Vocabulary { words, cumulative }
    })
}

/// The workload's randomness (fastrand's wyrand): seeded, so that a run can be repeated.
#[derive(Clone, Debug)]
pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(fastrand::Rng::with_seed(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// Uniform in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0.u64(..bound.max(1))
    }

    pub fn chance(&mut self, per_thousand: u64) -> bool {
        self.below(1000) < per_thousand
    }
}

/// A generator of distinct chat-like payloads.
#[derive(Clone, Debug)]
pub struct ChatText {
    rng: Rng,
    messages: u64,
}

impl ChatText {
    pub fn new(seed: u64) -> Self {
        ChatText {
            rng: Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xabcdef),
            messages: 0,
        }
    }

    /// One message of exactly `len` bytes.
    pub fn payload(&mut self, len: usize) -> Vec<u8> {
        self.messages += 1;
        let vocabulary = vocabulary();
        let role = ["user", "assistant", "tool"][self.rng.below(3) as usize];
        let mut text = format!(
            "{{\"role\":\"{role}\",\"id\":\"msg_{:016x}\",\"seq\":{},\"content\":\"",
            self.rng.next_u64(),
            self.messages
        );
        let mut sentence_words = 0;
        while text.len() < len {
            let roll = self.rng.below(1000);
            if roll < 12 {
                text.push_str(&format!("{:x}", self.rng.next_u64()));
            } else if roll < 40 {
                text.push_str(&format!("{}", self.rng.below(100_000)));
            } else if roll < 48 {
                text.push_str("\\n```\\nfn ");
                text.push_str(&self.word(vocabulary));
                text.push_str("(x: u64) -> u64 { x + 1 }\\n```\\n");
            } else {
                let word = self.word(vocabulary);
                if sentence_words == 0 {
                    let mut chars = word.chars();
                    if let Some(first) = chars.next() {
                        text.extend(first.to_uppercase());
                        text.push_str(chars.as_str());
                    }
                } else {
                    text.push_str(&word);
                }
            }
            sentence_words += 1;
            if sentence_words > 6 && self.rng.chance(120) {
                text.push_str(". ");
                sentence_words = 0;
            } else if self.rng.chance(60) {
                text.push_str(", ");
            } else {
                text.push(' ');
            }
        }
        text.truncate(len.saturating_sub(2));
        text.push_str("\"}");
        let mut bytes = text.into_bytes();
        bytes.resize(len, b' ');
        bytes
    }

    fn word(&mut self, vocabulary: &Vocabulary) -> String {
        let target = self.rng.next_u64();
        let index = vocabulary
            .cumulative
            .partition_point(|&c| c < target)
            .min(VOCABULARY_WORDS - 1);
        vocabulary.words[index].clone()
    }
}

/// `len` incompressible bytes.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ 0x1234_5678);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_asked_length_differ_and_compress_like_chat() {
        let mut text = ChatText::new(1);
        let payloads: Vec<Vec<u8>> = (0..200).map(|_| text.payload(10_240)).collect();
        assert!(payloads.iter().all(|p| p.len() == 10_240));
        let distinct: std::collections::HashSet<_> = payloads.iter().collect();
        assert_eq!(distinct.len(), payloads.len());
        let raw: usize = payloads.iter().map(Vec::len).sum();
        let compressed: usize = payloads
            .iter()
            .map(|p| {
                zstd::bulk::compress(p, 1)
                    .map(|c| c.len())
                    .unwrap_or(p.len())
            })
            .sum();
        let ratio = raw as f64 / compressed as f64;
        eprintln!("zstd-1 ratio {ratio:.2}");
        assert!((1.8..3.5).contains(&ratio), "ratio {ratio:.2}");
    }
}
