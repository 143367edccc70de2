//! The payload stream of one worker: chat-like text of `payload_bytes`, a share of duplicates
//! (payloads that repeat: shared system prompts, identical tool results), and every Nth append
//! a large incompressible payload (an image). Payloads are prepared up front and made unique by
//! stamping a counter into their message id, so generating them costs the load generator
//! almost nothing while it runs.

use bytes::Bytes;

use crate::workload::text::{ChatText, Rng, random_bytes};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PayloadConfig {
    pub payload_bytes: usize,
    /// Every Nth payload is large and incompressible (0: never).
    pub large_every: u64,
    pub large_bytes: usize,
    /// Share (0..=1) of payloads that repeat one of `SHARED_PAYLOADS` earlier payloads.
    pub dup_ratio: f64,
}

impl Default for PayloadConfig {
    fn default() -> Self {
        PayloadConfig {
            payload_bytes: 10 * 1024,
            large_every: 0,
            large_bytes: 1 << 20,
            dup_ratio: 0.0,
        }
    }
}

/// Distinct texts each worker stamps unique payloads from.
const BASE_PAYLOADS: usize = 32;
/// The set duplicates are drawn from (the same for every worker, so duplicates repeat
/// across contexts).
pub const SHARED_PAYLOADS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadKind {
    Unique,
    Duplicate,
    Large,
}

#[derive(Debug)]
pub struct PayloadSource {
    config: PayloadConfig,
    base: Vec<(Vec<u8>, usize)>,
    shared: Vec<Bytes>,
    large: Vec<u8>,
    rng: Rng,
    worker: u64,
    counter: u64,
}

impl PayloadSource {
    pub fn new(config: PayloadConfig, worker: u64) -> PayloadSource {
        let mut text = ChatText::new(worker.wrapping_add(1));
        let base = (0..BASE_PAYLOADS)
            .map(|_| {
                let payload = text.payload(config.payload_bytes);
                let stamp_at = find_stamp(&payload);
                (payload, stamp_at)
            })
            .collect();
        // Shared payloads come from one seed, so every worker has the same ones.
        let mut shared_text = ChatText::new(0x5a5a);
        let shared = (0..SHARED_PAYLOADS)
            .map(|_| Bytes::from(shared_text.payload(config.payload_bytes)))
            .collect();
        let large = if config.large_every > 0 {
            random_bytes(worker, config.large_bytes)
        } else {
            Vec::new()
        };
        PayloadSource {
            config,
            base,
            shared,
            large,
            rng: Rng::new(0xfeed ^ worker.wrapping_mul(31)),
            worker,
            counter: 0,
        }
    }

    pub fn next_payload(&mut self) -> (Bytes, PayloadKind) {
        self.counter += 1;
        if self.config.large_every > 0 && self.counter.is_multiple_of(self.config.large_every) {
            let mut large = self.large.clone();
            large[..8].copy_from_slice(&self.counter.to_le_bytes());
            large[8..16].copy_from_slice(&self.worker.to_le_bytes());
            return (Bytes::from(large), PayloadKind::Large);
        }
        if self.config.dup_ratio > 0.0
            && (self.rng.below(1_000_000) as f64) < self.config.dup_ratio * 1_000_000.0
        {
            let index = self.rng.below(SHARED_PAYLOADS as u64) as usize;
            return (self.shared[index].clone(), PayloadKind::Duplicate);
        }
        let (base, stamp_at) = &self.base[(self.counter as usize) % BASE_PAYLOADS];
        let mut payload = base.clone();
        stamp(&mut payload, *stamp_at, self.worker, self.counter);
        (Bytes::from(payload), PayloadKind::Unique)
    }
}

/// Where the 16 hex digits of the message id are (`"id":"msg_…"`), or 0.
fn find_stamp(payload: &[u8]) -> usize {
    payload
        .windows(4)
        .position(|window| window == b"msg_")
        .map_or(0, |at| at + 4)
}

/// Writes worker and counter as 16 hex digits: distinct payloads, still valid text.
fn stamp(payload: &mut [u8], at: usize, worker: u64, counter: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let value = (worker << 40) ^ counter;
    let end = (at + 16).min(payload.len());
    for (index, byte) in payload[at..end].iter_mut().enumerate() {
        *byte = HEX[((value >> (60 - 4 * index)) & 0xf) as usize];
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn unique_payloads_are_unique_and_the_right_size() {
        let mut source = PayloadSource::new(PayloadConfig::default(), 3);
        let mut seen = HashSet::new();
        for _ in 0..2000 {
            let (payload, kind) = source.next_payload();
            assert_eq!(kind, PayloadKind::Unique);
            assert_eq!(payload.len(), 10 * 1024);
            assert!(seen.insert(payload));
        }
        // Two workers never collide.
        let mut other = PayloadSource::new(PayloadConfig::default(), 4);
        for _ in 0..2000 {
            assert!(seen.insert(other.next_payload().0));
        }
    }

    #[test]
    fn the_duplicate_ratio_holds_and_duplicates_repeat_across_workers() {
        let config = PayloadConfig {
            dup_ratio: 0.3,
            ..PayloadConfig::default()
        };
        let mut source = PayloadSource::new(config, 1);
        let total = 20_000;
        let duplicates = (0..total)
            .filter(|_| source.next_payload().1 == PayloadKind::Duplicate)
            .count();
        let ratio = duplicates as f64 / total as f64;
        assert!((0.28..0.32).contains(&ratio), "duplicate ratio {ratio}");
        let mut a = PayloadSource::new(
            PayloadConfig {
                dup_ratio: 1.0,
                ..config
            },
            1,
        );
        let mut b = PayloadSource::new(
            PayloadConfig {
                dup_ratio: 1.0,
                ..config
            },
            2,
        );
        let shared_a: HashSet<Bytes> = (0..500).map(|_| a.next_payload().0).collect();
        let shared_b: HashSet<Bytes> = (0..500).map(|_| b.next_payload().0).collect();
        assert_eq!(shared_a.len(), SHARED_PAYLOADS);
        assert_eq!(shared_a, shared_b);
    }

    #[test]
    fn every_nth_payload_is_large_and_incompressible() {
        let config = PayloadConfig {
            large_every: 10,
            ..PayloadConfig::default()
        };
        let mut source = PayloadSource::new(config, 1);
        let kinds: Vec<PayloadKind> = (0..100).map(|_| source.next_payload().1).collect();
        assert_eq!(
            kinds
                .iter()
                .filter(|kind| **kind == PayloadKind::Large)
                .count(),
            10
        );
        assert_eq!(kinds[9], PayloadKind::Large);
        let mut source = PayloadSource::new(config, 2);
        let large = (0..10)
            .map(|_| source.next_payload())
            .find(|(_, kind)| *kind == PayloadKind::Large)
            .unwrap()
            .0;
        assert_eq!(large.len(), 1 << 20);
        let compressed = zstd::bulk::compress(&large, 1).unwrap();
        assert!(
            compressed.len() as f64 > large.len() as f64 * 0.99,
            "incompressible"
        );
    }
}
