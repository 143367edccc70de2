//! Little-endian reading, bounds-checked: the one reader under every decoder of ctxstore's
//! bytes — the wire (the protocol's `Cursor`), the disk (the engine's formats) and the object
//! store (the replica's objects). Each decoder wraps it to name its own errors; none reads an
//! integer by hand.
//!
//! Two shapes, as the formats have them: a [`LeReader`] walks a body of variable length and
//! answers [`ShortRead`] where it ends early (input from outside: never a panic); the `*_at`
//! functions read a field at a constant offset of a record whose length the caller checked
//! first (an offset past the end is a programming error and panics, on the first test run).

/// A read past the end of a body: where it started, how many bytes it needed, how many were
/// left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortRead {
    pub at: usize,
    pub needed: usize,
    pub left: usize,
}

impl ShortRead {
    /// The length the body would have needed: where the read started plus what it needed.
    pub fn needed_len(&self) -> usize {
        self.at.saturating_add(self.needed)
    }
}

/// A bounds-checked little-endian reader over a body.
#[derive(Clone, Debug)]
pub struct LeReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> LeReader<'a> {
    pub const fn new(bytes: &'a [u8]) -> Self {
        LeReader { bytes, at: 0 }
    }

    /// A reader at `at` of `bytes` (a decoder that keeps its position itself); past the end
    /// it reads nothing.
    pub fn at(bytes: &'a [u8], at: usize) -> Self {
        LeReader {
            bytes,
            at: at.min(bytes.len()),
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], ShortRead> {
        if len > self.remaining() {
            return Err(ShortRead {
                at: self.at,
                needed: len,
                left: self.remaining(),
            });
        }
        let taken = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(taken)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ShortRead> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn u8(&mut self) -> Result<u8, ShortRead> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, ShortRead> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, ShortRead> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, ShortRead> {
        self.array().map(u64::from_le_bytes)
    }

    /// An IEEE 754 single (a vector's component); NaN and infinities are the caller's to refuse.
    pub fn f32(&mut self) -> Result<f32, ShortRead> {
        self.array().map(f32::from_le_bytes)
    }
}

/// `N` bytes at a constant offset of a record whose length was checked.
pub fn array_at<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut array = [0u8; N];
    array.copy_from_slice(&bytes[at..at + N]);
    array
}

pub fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(array_at(bytes, at))
}

pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(array_at(bytes, at))
}

pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(array_at(bytes, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_stops_at_the_end() {
        let bytes = [
            1, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 9, 0, 0, 0, 0, 0, 0, 0, 7,
        ];
        let mut reader = LeReader::new(&bytes);
        assert_eq!(reader.u8(), Ok(1));
        assert_eq!(reader.u16(), Ok(0x1234));
        assert_eq!(reader.u32(), Ok(0x1234_5678));
        assert_eq!(reader.u64(), Ok(9));
        assert_eq!(reader.position(), 15);
        assert_eq!(
            reader.u16(),
            Err(ShortRead {
                at: 15,
                needed: 2,
                left: 1
            })
        );
        // A short read takes nothing.
        assert_eq!(reader.rest(), &[7]);
        assert_eq!(reader.take(1), Ok(&[7u8][..]));
        assert_eq!(reader.remaining(), 0);
        assert_eq!(
            reader.take(usize::MAX).map_err(|e| e.needed_len()),
            Err(usize::MAX)
        );
    }

    #[test]
    fn a_reader_at_an_offset_and_fields_at_offsets_agree() {
        let bytes: Vec<u8> = (0u8..16).collect();
        for at in 0..8 {
            let mut reader = LeReader::at(&bytes, at);
            assert_eq!(reader.u64(), Ok(u64_at(&bytes, at)));
            let mut reader = LeReader::at(&bytes, at);
            assert_eq!(reader.u32(), Ok(u32_at(&bytes, at)));
            let mut reader = LeReader::at(&bytes, at);
            assert_eq!(reader.u16(), Ok(u16_at(&bytes, at)));
        }
        assert_eq!(LeReader::at(&bytes, 99).remaining(), 0);
    }
}
