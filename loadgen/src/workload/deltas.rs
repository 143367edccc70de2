//! Token deltas of the streaming workload (issue 32): what a model emits while it answers,
//! 4–40 bytes of text at a time.
//!
//! A delta is a pure function of (seed, stream slot, delta index), so the reader that follows
//! a stream regenerates what its writer sent and checks every byte it is delivered, and knows
//! each delta's intended send time without any state shared with the writer.

use bytes::Bytes;

use crate::workload::text::Rng;

/// What token text is made of: letters and the spaces and punctuation between words.
const ALPHABET: &[u8] = b"etaoinshrdlucmfwypvbgkjqxz     ,.\n";

/// Delta lengths, inclusive bounds, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaBytes {
    pub min: usize,
    pub max: usize,
}

impl Default for DeltaBytes {
    fn default() -> Self {
        DeltaBytes { min: 4, max: 40 }
    }
}

impl DeltaBytes {
    /// Bounds a server takes: 1 byte to 1 MiB per STREAM_APPEND (docs/protocol.md).
    pub const MAX: usize = 1 << 20;

    pub fn validate(&self) -> Result<(), String> {
        if self.min == 0 || self.min > self.max || self.max > Self::MAX {
            return Err(format!(
                "--delta-bytes-min {} and --delta-bytes-max {} must satisfy 1 <= min <= max <= {}",
                self.min,
                self.max,
                Self::MAX
            ));
        }
        Ok(())
    }
}

/// Delta `index` of the stream slot `slot`: `bounds.min..=bounds.max` bytes of token text.
pub fn delta(seed: u64, slot: u64, index: u64, bounds: DeltaBytes) -> Bytes {
    let mut rng = Rng::new(
        seed ^ slot.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ index.wrapping_add(1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
    );
    let span = (bounds.max - bounds.min) as u64 + 1;
    let len = bounds.min + rng.below(span) as usize;
    let bytes: Vec<u8> = (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
        .collect();
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_repeat_with_their_coordinates_and_keep_their_bounds() {
        let bounds = DeltaBytes::default();
        assert_eq!(delta(1, 2, 3, bounds), delta(1, 2, 3, bounds));
        assert_ne!(delta(1, 2, 3, bounds), delta(1, 2, 4, bounds));
        assert_ne!(delta(1, 2, 3, bounds), delta(1, 3, 3, bounds));
        let lengths: Vec<usize> = (0..2000).map(|i| delta(7, 0, i, bounds).len()).collect();
        assert!(lengths.iter().all(|len| (4..=40).contains(len)));
        assert!(lengths.contains(&4) && lengths.contains(&40));
    }

    #[test]
    fn bounds_are_checked() {
        assert!(DeltaBytes { min: 0, max: 4 }.validate().is_err());
        assert!(DeltaBytes { min: 5, max: 4 }.validate().is_err());
        assert!(
            DeltaBytes {
                min: 1,
                max: (1 << 20) + 1
            }
            .validate()
            .is_err()
        );
        assert!(DeltaBytes::default().validate().is_ok());
    }
}
