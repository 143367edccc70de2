//! The seeded generator of the randomized campaigns (xorshift64): the same seed, the same
//! operations, so a failing seed is run again by naming it.

/// A small seeded generator. Seed with any value; zero is mapped to a fixed odd one.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> SeededRng {
        SeededRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value (xorshift64).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `len` incompressible bytes, the same for the same seed: payloads whose stored size is
/// their size, and that no other seed repeats (dedup stays out of a test's way).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    (0..len).map(|_| (rng.next_u64() >> 24) as u8).collect()
}
