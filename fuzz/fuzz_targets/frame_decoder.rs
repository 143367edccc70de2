//! The bytes a client can send, as the server reads them: frames cut from a stream with a size
//! limit, each decoded as a request. Nothing may panic; whatever decodes must re-encode to the
//! very bytes it came from (frame flags included). Requests decode as a version-1, a version-2,
//! a version-3 and a version-4 connection would: what an older version accepts, the newest
//! reads the same, and no version accepts a message newer than itself (version 3's streams,
//! issue 32, and key-value TTL, issue 34; version 4's ROLE) nor a frame flag newer than itself
//! (version 4's ACK_AFTER, bits 3-4, only on the writes that take it and never 3). Responses are decoded too, as a client reads them: from a frame
//! reader of answers, whose frames may carry MORE (STREAM_FOLLOW's frames, issue 32); a
//! decoded answer re-encodes to its bytes and its flags.
#![no_main]

use bytes::BytesMut;
use ctxstore_protocol::{ERROR_TYPE, FrameHeader, frame_flags, FrameReader, HEADER_BYTES, RESPONSE_BIT, decode_request, decode_request_as, decode_response, encode_request, encode_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks how the stream is chunked, as reads would.
    let Some((&step, stream)) = data.split_first() else { return };
    let step = usize::from(step.max(1));
    read_answers(stream, step);
    let mut reader = FrameReader::new(64 * 1024);
    for piece in stream.chunks(step) {
        reader.buffer().extend_from_slice(piece);
        loop {
            match reader.next_frame() {
                Ok(Some((header, body))) => {
                    if let Ok(request) = decode_request(&header, body.clone()) {
                        let mut again = BytesMut::new();
                        encode_request(header.req_id, &request, &mut again).expect("a decoded request is encodable");
                        assert_eq!(&again[HEADER_BYTES..], &body[..], "request encoding is not canonical");
                        assert_eq!(request.frame_flags(), header.flags, "frame flags are not canonical");
                    }
                    if let Ok(request) = decode_request_as(1, &header, body.clone()) {
                        assert_eq!(header.flags, 0, "version 1 accepted a frame flag");
                        assert_eq!(request.message_type().since_version(), 1, "version 1 accepted a newer message");
                        assert_eq!(decode_request(&header, body.clone()).ok(), Some(request), "versions disagree");
                    }
                    if let Ok(request) = decode_request_as(2, &header, body.clone()) {
                        assert!(request.message_type().since_version() <= 2, "version 2 accepted a newer message");
                        assert_eq!(decode_request(&header, body.clone()).ok(), Some(request), "versions disagree");
                    }
                    if let Ok(request) = decode_request_as(3, &header, body.clone()) {
                        assert!(request.message_type().since_version() <= 3, "version 3 accepted a newer message");
                        assert_eq!(header.flags & frame_flags::ACK_AFTER, 0, "version 3 accepted ACK_AFTER");
                        assert_eq!(decode_request(&header, body.clone()).ok(), Some(request), "versions disagree");
                    }
                    if let Ok(request) = decode_request_as(4, &header, body.clone()) {
                        let after = header.flags & frame_flags::ACK_AFTER;
                        assert!(after == 0 || request.message_type().takes_ack_after(), "ACK_AFTER on a message that takes none");
                        assert_ne!(after, frame_flags::ACK_AFTER, "ACK_AFTER 3 accepted");
                    }
                }
                Ok(None) => break,
                // Framing is lost: the server closes the connection here.
                Err(_) => return,
            }
        }
    }
});

/// The same bytes as a client reads them: every frame (its type made an answer's) decoded as
/// an answer; what decodes re-encodes to the same body and flags.
fn read_answers(stream: &[u8], step: usize) {
    let mut reader = FrameReader::for_answers(64 * 1024);
    for piece in stream.chunks(step) {
        reader.buffer().extend_from_slice(piece);
        loop {
            match reader.next_frame() {
                Ok(Some((header, body))) => {
                    let as_response = FrameHeader { msg_type: header.msg_type | RESPONSE_BIT, ..header };
                    if let Ok(response) = decode_response(&as_response, body.clone()) {
                        let again: Vec<u8> = encode_response(header.req_id, &response).iter().flat_map(|c| c.to_vec()).collect();
                        assert_eq!(&again[HEADER_BYTES..], &body[..], "response encoding is not canonical");
                        let mut again_header = [0u8; HEADER_BYTES];
                        again_header.copy_from_slice(&again[..HEADER_BYTES]);
                        // ERROR answers any request whatever its flags: its own are not read.
                        if header.msg_type | RESPONSE_BIT != ERROR_TYPE {
                            assert_eq!(FrameHeader::decode(&again_header).flags, header.flags, "response frame flags are not canonical");
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
