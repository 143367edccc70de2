//! The turns the garbage collector collected (decision 0011): once a turn is dead its blob may
//! be gone, so three parties must agree on it for good — recovery (a missing blob is expected
//! for a dead turn, data loss for a live one), readers (a dead turn reads as not found) and the
//! sequencer (nothing may name a dead turn again: a fork, an explicit parent or a link would
//! make collected history reachable). The set is written to `turns.log` as gc-dead records
//! (op 9) and rebuilt by replay.
//!
//! A bitmap by TurnID: one bit per record id, 1.25 MB per 10 million records, O(1) look-ups.
//! Dead turns of many interleaved contexts are scattered, so ranges would not be smaller.

use crate::format::context_meta::{ContextMeta, GC_DEAD_WORDS_MAX};
use crate::ids::TurnId;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeadTurns {
    /// Bit `id % 64` of word `id / 64`.
    words: Vec<u64>,
    count: u64,
}

impl DeadTurns {
    pub fn contains(&self, turn_id: TurnId) -> bool {
        let word = (turn_id.0 / 64) as usize;
        self.words
            .get(word)
            .is_some_and(|bits| bits & (1 << (turn_id.0 % 64)) != 0)
    }

    /// Dead turns in the set.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a turn; true if it was not dead before.
    pub fn insert(&mut self, turn_id: TurnId) -> bool {
        assert!(!turn_id.is_none(), "TurnID 0 is no turn");
        let word = (turn_id.0 / 64) as usize;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let bit = 1 << (turn_id.0 % 64);
        let added = self.words[word] & bit == 0;
        self.words[word] |= bit;
        self.count += u64::from(added);
        added
    }

    /// Adds every turn of another set.
    pub fn extend(&mut self, other: &DeadTurns) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        let mut count = 0;
        for (word, bits) in self.words.iter_mut().zip(&other.words) {
            *word |= bits;
        }
        for word in &self.words {
            count += u64::from(word.count_ones());
        }
        self.count = count;
    }

    /// Applies one gc-dead record (replay and the live path alike).
    pub fn apply(&mut self, first_turn_id: u64, words: &[u64]) {
        let start = (first_turn_id / 64) as usize;
        if start + words.len() > self.words.len() {
            self.words.resize(start + words.len(), 0);
        }
        for (offset, bits) in words.iter().enumerate() {
            let word = &mut self.words[start + offset];
            self.count += u64::from((bits & !*word).count_ones());
            *word |= bits;
        }
    }

    /// The gc-dead records that carry this set: one per run of at most `GC_DEAD_WORDS_MAX`
    /// words, skipping runs of zero words, trimmed of zero words at both ends.
    pub fn records(&self) -> Vec<ContextMeta> {
        let mut records = Vec::new();
        let mut word = 0;
        while word < self.words.len() {
            if self.words[word] == 0 {
                word += 1;
                continue;
            }
            let end = (word + GC_DEAD_WORDS_MAX).min(self.words.len());
            let mut last = end;
            while self.words[last - 1] == 0 {
                last -= 1;
            }
            records.push(ContextMeta::GcDead {
                first_turn_id: word as u64 * 64,
                words: self.words[word..last].to_vec(),
            });
            word = end;
        }
        records
    }

    /// Every dead TurnID, ascending.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = TurnId> + '_ {
        self.words.iter().enumerate().flat_map(|(word, &bits)| {
            (0..64)
                .filter(move |bit| bits & (1 << bit) != 0)
                .map(move |bit| TurnId(word as u64 * 64 + bit))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_the_set_and_decode_back() {
        let mut dead = DeadTurns::default();
        for id in [1u64, 2, 63, 64, 700, 600_000, 600_001, 2_000_000] {
            assert!(dead.insert(TurnId(id)));
        }
        assert!(!dead.insert(TurnId(700)));
        assert_eq!(dead.count(), 8);
        let mut rebuilt = DeadTurns::default();
        for record in dead.records() {
            let body = record.encode();
            let ContextMeta::GcDead {
                first_turn_id,
                words,
            } = ContextMeta::decode(record.op(), &body).expect("decodes")
            else {
                panic!("not a gc-dead record");
            };
            rebuilt.apply(first_turn_id, &words);
        }
        assert_eq!(rebuilt.count(), 8);
        assert_eq!(
            rebuilt.iter().collect::<Vec<_>>(),
            dead.iter().collect::<Vec<_>>()
        );
        assert!(rebuilt.contains(TurnId(600_001)) && !rebuilt.contains(TurnId(600_002)));
    }
}
