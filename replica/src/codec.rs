//! Reading and writing the replica's binary objects: little-endian, explicitly sized fields,
//! every read bounds-checked (an object from the bucket is input: it is checked, never trusted,
//! and never panics the reader).

use ctxstore_vocab::le::{LeReader, ShortRead};

use crate::error::FormatError;

/// Appends fields to a buffer.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// A count that the reader bounds: written as u32.
    pub fn count(&mut self, count: usize) {
        assert!(count <= u32::MAX as usize, "count {count} does not fit u32");
        self.u32(count as u32);
    }

    /// Bytes with a u32 length before them.
    pub fn blob(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.raw(bytes);
    }
}

/// Reads fields of one object, naming the object in every error (`ctxstore_vocab::le`
/// underneath).
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    le: LeReader<'a>,
    what: &'a str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], what: &'a str) -> Reader<'a> {
        Reader {
            le: LeReader::new(bytes),
            what,
        }
    }

    pub fn remaining(&self) -> usize {
        self.le.remaining()
    }

    fn error(&self, reason: impl Into<String>) -> FormatError {
        FormatError {
            object: self.what.to_string(),
            offset: self.le.position() as u64,
            reason: reason.into(),
        }
    }

    fn short(&self, short: ShortRead) -> FormatError {
        self.error(format!(
            "needs {} more bytes, {} are left",
            short.needed, short.left
        ))
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], FormatError> {
        self.le.take(len).map_err(|short| self.short(short))
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        self.le.array().map_err(|short| self.short(short))
    }

    pub fn u8(&mut self) -> Result<u8, FormatError> {
        self.le.u8().map_err(|short| self.short(short))
    }

    pub fn u16(&mut self) -> Result<u16, FormatError> {
        self.le.u16().map_err(|short| self.short(short))
    }

    pub fn u32(&mut self) -> Result<u32, FormatError> {
        self.le.u32().map_err(|short| self.short(short))
    }

    pub fn u64(&mut self) -> Result<u64, FormatError> {
        self.le.u64().map_err(|short| self.short(short))
    }

    /// A count of items of at least `item_bytes` each, at most `max`: refused before anything
    /// is allocated for it if the object cannot hold that many.
    pub fn count(&mut self, max: usize, item_bytes: usize) -> Result<usize, FormatError> {
        let count = self.u32()? as usize;
        if count > max {
            return Err(self.error(format!("count {count} is over its limit {max}")));
        }
        if count.saturating_mul(item_bytes.max(1)) > self.remaining() {
            return Err(self.error(format!(
                "count {count} of {item_bytes}-byte items does not fit the {} bytes left",
                self.remaining()
            )));
        }
        Ok(count)
    }

    pub fn blob(&mut self, max: usize) -> Result<&'a [u8], FormatError> {
        let len = self.count(max, 1)?;
        self.take(len)
    }

    /// The check of a field's value; `Err` names the object, offset and reason.
    pub fn check(&self, ok: bool, reason: impl FnOnce() -> String) -> Result<(), FormatError> {
        if ok {
            Ok(())
        } else {
            Err(self.error(reason()))
        }
    }

    pub fn finish(&self) -> Result<(), FormatError> {
        self.check(self.remaining() == 0, || {
            format!("{} bytes follow the object's end", self.remaining())
        })
    }
}
