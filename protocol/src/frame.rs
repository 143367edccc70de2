//! Frames: a 16-byte header, then `len` bytes of body. Little endian. docs/protocol.md#frames.
//!
//! ```text
//! offset size field
//!      0    4 len       body bytes that follow the header
//!      4    2 msg_type  see `message::MessageType`
//!      6    2 flags     0 in protocol version 1; version 2 defines bit 0, CTX_BY_NAME, and
//!                       bit 1, OVERLAYS; version 3 bit 2, MORE (answers only); version 4
//!                       bits 3-4, ACK_AFTER (requests only) (`message::frame_flags`);
//!                       unknown bits are BAD_FRAME
//!      8    8 req_id    chosen by the client; the response carries the same value
//! ```

use bytes::{Buf, Bytes, BytesMut};

use crate::message::frame_flags;

pub const HEADER_BYTES: usize = 16;
/// Hard ceiling of any frame body, whatever a server is configured to accept.
pub const FRAME_BYTES_LIMIT: u32 = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub msg_type: u16,
    pub flags: u16,
    pub req_id: u64,
}

impl FrameHeader {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[0..4].copy_from_slice(&self.len.to_le_bytes());
        bytes[4..6].copy_from_slice(&self.msg_type.to_le_bytes());
        bytes[6..8].copy_from_slice(&self.flags.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.req_id.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> FrameHeader {
        let mut source = &bytes[..];
        FrameHeader {
            len: source.get_u32_le(),
            msg_type: source.get_u16_le(),
            flags: source.get_u16_le(),
            req_id: source.get_u64_le(),
        }
    }
}

/// A frame the reader cannot accept. Framing is lost after it: the connection must close.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u32, max: u32, req_id: u64 },
    #[error("frame flags {flags:#06x} have bits this protocol does not define")]
    BadFlags { flags: u16, req_id: u64 },
}

impl FrameError {
    pub fn req_id(&self) -> u64 {
        match self {
            FrameError::TooLarge { req_id, .. } | FrameError::BadFlags { req_id, .. } => *req_id,
        }
    }
}

/// Cuts frames out of a byte stream. Bytes are appended to `buffer()`; `next_frame` returns
/// each complete frame's header and body (a zero-copy slice of the buffer).
#[derive(Debug)]
pub struct FrameReader {
    buffer: BytesMut,
    frame_bytes_max: u32,
    /// The flag bits a frame may carry: a request's (`frame_flags::KNOWN`) or an answer's
    /// (`frame_flags::ANSWER_KNOWN`); any other bit is `FrameError::BadFlags`.
    flags_known: u16,
}

impl FrameReader {
    /// A reader of requests (a server's).
    pub fn new(frame_bytes_max: u32) -> Self {
        FrameReader {
            buffer: BytesMut::with_capacity(64 * 1024),
            frame_bytes_max: frame_bytes_max.min(FRAME_BYTES_LIMIT),
            flags_known: frame_flags::KNOWN,
        }
    }

    /// A reader of answers (a client's): their frames may also carry MORE (STREAM_FOLLOW's
    /// frames, version 3).
    pub fn for_answers(frame_bytes_max: u32) -> Self {
        FrameReader {
            flags_known: frame_flags::ANSWER_KNOWN,
            ..FrameReader::new(frame_bytes_max)
        }
    }

    /// Where the next read appends its bytes.
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buffer
    }

    /// Takes the buffer out (for runtimes that read into owned buffers); give it back with
    /// `restore`.
    pub fn take_buffer(&mut self) -> BytesMut {
        std::mem::take(&mut self.buffer)
    }

    pub fn restore(&mut self, buffer: BytesMut) {
        self.buffer = buffer;
    }

    /// Bytes received but not yet part of a returned frame.
    pub fn pending_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes the buffer should have free for the next read: at least the rest of the frame
    /// being received, so that a large frame is read in few steps.
    pub fn wanted_capacity(&self) -> usize {
        const READ_BYTES_MIN: usize = 64 * 1024;
        if self.buffer.len() >= HEADER_BYTES {
            let mut header = [0u8; HEADER_BYTES];
            header.copy_from_slice(&self.buffer[..HEADER_BYTES]);
            let len = FrameHeader::decode(&header).len.min(self.frame_bytes_max) as usize;
            (HEADER_BYTES + len)
                .saturating_sub(self.buffer.len())
                .max(READ_BYTES_MIN)
        } else {
            READ_BYTES_MIN
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<(FrameHeader, Bytes)>, FrameError> {
        if self.buffer.len() < HEADER_BYTES {
            return Ok(None);
        }
        let mut header_bytes = [0u8; HEADER_BYTES];
        header_bytes.copy_from_slice(&self.buffer[..HEADER_BYTES]);
        let header = FrameHeader::decode(&header_bytes);
        if header.len > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                len: header.len,
                max: self.frame_bytes_max,
                req_id: header.req_id,
            });
        }
        // Which messages may carry which flag is the decoder's business (it knows the type);
        // bits no version defines are refused here, from the header alone.
        if header.flags & !self.flags_known != 0 {
            return Err(FrameError::BadFlags {
                flags: header.flags,
                req_id: header.req_id,
            });
        }
        let total = HEADER_BYTES + header.len as usize;
        if self.buffer.len() < total {
            self.buffer.reserve(total - self.buffer.len());
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(total).freeze();
        frame.advance(HEADER_BYTES);
        Ok(Some((header, frame)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: u32, msg_type: u16, req_id: u64) -> Vec<u8> {
        let mut bytes = FrameHeader {
            len,
            msg_type,
            flags: 0,
            req_id,
        }
        .encode()
        .to_vec();
        bytes.extend(std::iter::repeat_n(0xab, len as usize));
        bytes
    }

    #[test]
    fn frames_arrive_in_pieces_and_whole() {
        let mut stream = frame(5, 2, 7);
        stream.extend(frame(0, 3, 8));
        let mut reader = FrameReader::new(1024);
        let mut frames = Vec::new();
        for byte in stream {
            reader.buffer().extend_from_slice(&[byte]);
            while let Some((header, body)) = reader.next_frame().unwrap() {
                frames.push((header.msg_type, header.req_id, body.len()));
            }
        }
        assert_eq!(frames, vec![(2, 7, 5), (3, 8, 0)]);
        assert_eq!(reader.pending_bytes(), 0);
    }

    #[test]
    fn oversized_and_flagged_frames_are_refused_from_the_header() {
        let mut reader = FrameReader::new(100);
        reader.buffer().extend_from_slice(
            &FrameHeader {
                len: 101,
                msg_type: 1,
                flags: 0,
                req_id: 9,
            }
            .encode(),
        );
        assert_eq!(
            reader.next_frame(),
            Err(FrameError::TooLarge {
                len: 101,
                max: 100,
                req_id: 9
            })
        );
        let mut reader = FrameReader::new(100);
        reader.buffer().extend_from_slice(
            &FrameHeader {
                len: 0,
                msg_type: 1,
                flags: 4,
                req_id: 3,
            }
            .encode(),
        );
        assert_eq!(
            reader.next_frame(),
            Err(FrameError::BadFlags {
                flags: 4,
                req_id: 3
            })
        );
    }

    #[test]
    fn answers_may_say_more_and_requests_may_not() {
        let more = FrameHeader {
            len: 0,
            msg_type: 0x8038,
            flags: frame_flags::MORE,
            req_id: 5,
        }
        .encode();
        let mut answers = FrameReader::for_answers(100);
        answers.buffer().extend_from_slice(&more);
        let (header, body) = answers.next_frame().unwrap().unwrap();
        assert_eq!(
            (header.flags, header.req_id, body.len()),
            (frame_flags::MORE, 5, 0)
        );
        let mut requests = FrameReader::new(100);
        requests.buffer().extend_from_slice(&more);
        assert_eq!(
            requests.next_frame(),
            Err(FrameError::BadFlags {
                flags: frame_flags::MORE,
                req_id: 5
            })
        );
        let unknown = FrameHeader {
            flags: 1 << 3,
            ..FrameHeader::decode(&more)
        };
        let mut answers = FrameReader::for_answers(100);
        answers.buffer().extend_from_slice(&unknown.encode());
        assert_eq!(
            answers.next_frame(),
            Err(FrameError::BadFlags {
                flags: 1 << 3,
                req_id: 5
            })
        );
    }
}
