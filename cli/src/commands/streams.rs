//! `stream`, `streams`, `stream-read` (protocol version 3, issue 32): stdin into a turn as it
//! arrives, a context's open streams, a stream's bytes from an offset (followed until it ends:
//! pushed by STREAM_FOLLOW, or long polls from an older server; a sealed stream's rest read
//! from its turn, an aborted one an error).

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    Appended, ContextRef, NewStream, StreamInfo, StreamState, WATCH_FROM_NOW, WatchEventWire,
    WatchKindWire, WatchTargetWire, codec_name,
};
use serde_json::json;

use crate::args::Command;
use crate::output::{Output, write_stdout};

/// Bytes one read of stdin takes at most: one delta (a read returns what has arrived).
const DELTA_BYTES_MAX: usize = 64 * 1024;
/// Bytes one STREAM_READ asks for.
const READ_BYTES_MAX: u32 = 1024 * 1024;
/// How long one long poll of `stream-read --follow` waits before asking again.
const FOLLOW_WAIT: Duration = Duration::from_secs(30);

pub(crate) fn streams(client: &Client, out: &Output, command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Stream {
            context,
            type_tag,
            codec,
            expect_head,
            key,
            labels,
            // `--durability`: the client's (`connect`), on the seal.
            durability: _,
        } => {
            let mut new = NewStream::new(*type_tag, *codec);
            new.expected_head = *expect_head;
            new.key = key.clone().map(Bytes::from);
            new.labels = labels.clone();
            write_stream(client, out, context, new)
        }
        Command::Streams { context } => {
            let mut after = 0;
            loop {
                let page = client.open_streams(context.clone(), after, 1024)?;
                for info in &page {
                    out.stream_info(info)?;
                }
                match page.last() {
                    Some(last) if page.len() == 1024 => after = last.stream_id,
                    _ => return Ok(()),
                }
            }
        }
        Command::StreamRead {
            stream,
            from,
            follow,
        } => read_stream(client, *stream, *from, *follow),
        Command::Follow { context } => {
            let target = WatchTargetWire::Context(context.clone());
            let mut after = client
                .watch(target.clone(), WATCH_FROM_NOW, 1, None)?
                .resume_after;
            loop {
                let watched = client.watch(target.clone(), after, 1024, Some(FOLLOW_WAIT))?;
                if watched.lagged {
                    eprintln!(
                        "ctxstore: follow fell behind the server's kept events; going on from \
                         event {}",
                        watched.resume_after
                    );
                }
                for event in &watched.events {
                    out.event(event)?;
                    if event.kind == WatchKindWire::Deleted {
                        return Ok(());
                    }
                }
                after = watched.resume_after;
            }
        }
        _ => anyhow::bail!("not a stream command"),
    }
}

/// `stream`: stdin into a new stream of `context`, a delta per read, sealed at its end.
fn write_stream(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    new: NewStream,
) -> anyhow::Result<()> {
    let stream = client.open_stream(context.clone(), new)?;
    let mut stdin = std::io::stdin().lock();
    let mut buffer = vec![0u8; DELTA_BYTES_MAX];
    loop {
        let read = match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("reading stdin for stream {}", stream.stream_id));
            }
        };
        let delta = Bytes::copy_from_slice(&buffer[..read]);
        let length = client.append_delta(stream.stream_id, None, delta)?;
        out.delta(stream.stream_id, length)?;
    }
    let sealed = client.seal_stream(stream.stream_id).with_context(|| {
        format!(
            "sealing stream {} (still open: read it with `ctxstore stream-read {}`)",
            stream.stream_id, stream.stream_id
        )
    })?;
    out.sealed(stream.stream_id, &sealed)
}

/// `stream-read`: a stream's bytes from `from` to stdout; with `follow`, until it ends.
fn read_stream(client: &Client, stream: u64, from: u64, follow: bool) -> anyhow::Result<()> {
    if follow {
        // Pushed (STREAM_FOLLOW), or long polls from a server older than it; at the
        // seal the reader reads the rest from the sealed turn.
        let mut reader = client.stream_reader(stream, from);
        while let Some(chunk) = reader.next() {
            let chunk = chunk.with_context(|| reading_at(stream, reader.offset()))?;
            write_stdout(&chunk.bytes)?;
            if chunk.state == StreamState::Aborted {
                return Err(aborted(stream, reader.offset()));
            }
        }
        return Ok(());
    }
    let mut offset = from;
    loop {
        let chunk = client
            .read_stream(stream, offset, READ_BYTES_MAX, None)
            .with_context(|| reading_at(stream, offset))?;
        if !chunk.bytes.is_empty() {
            write_stdout(&chunk.bytes)?;
            offset += chunk.bytes.len() as u64;
        }
        let caught_up = chunk.bytes.is_empty() || offset >= chunk.length;
        match chunk.state {
            StreamState::Open if !caught_up => {}
            StreamState::Open => return Ok(()),
            // Sealed while nobody read (or before this read): the rest is the turn's.
            StreamState::Sealed(turn_id) => {
                let rest = client
                    .sealed_stream_rest(stream, turn_id, offset)
                    .with_context(|| reading_at(stream, offset))?;
                return write_stdout(&rest);
            }
            StreamState::Aborted => return Err(aborted(stream, offset)),
        }
    }
}

/// What a failed read of a stream was doing: which stream, from which byte (where to resume).
fn reading_at(stream_id: u64, offset: u64) -> String {
    format!("reading stream {stream_id} from byte {offset}")
}

/// An aborted stream's end: the bytes printed (those read before the abort) never became a
/// turn.
fn aborted(stream_id: u64, offset: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "stream {stream_id} was aborted (read to byte {offset}): it never became a turn"
    )
}

impl Output {
    fn delta(&self, stream_id: u64, length: u64) -> anyhow::Result<()> {
        if self.json {
            self.line(&json!({"stream_id": stream_id, "length": length}))
        } else {
            Ok(())
        }
    }

    fn sealed(&self, stream_id: u64, sealed: &Appended) -> anyhow::Result<()> {
        let turn = &sealed.turn;
        if self.json {
            self.line(&json!({
                "stream_id": stream_id,
                "turn_id": turn.turn_id,
                "parent_turn_id": turn.parent_turn_id,
                "depth": turn.depth,
                "payload_hash": turn.payload_hash.to_hex(),
                "payload_len": turn.payload_len,
                "deduped": sealed.deduped,
            }))
        } else {
            self.text(&format!(
                "stream {stream_id} sealed: turn {} depth {} {} bytes {}",
                turn.turn_id, turn.depth, turn.payload_len, turn.payload_hash
            ))
        }
    }

    fn event(&self, event: &WatchEventWire) -> anyhow::Result<()> {
        let name = match event.kind {
            WatchKindWire::Head => "head",
            WatchKindWire::StreamOpened => "stream_opened",
            WatchKindWire::StreamSealed => "stream_sealed",
            WatchKindWire::StreamAborted => "stream_aborted",
            WatchKindWire::Tags => "tags",
            WatchKindWire::Deleted => "deleted",
        };
        if self.json {
            self.line(&json!({
                "seq": event.seq,
                "event": name,
                "context_id": event.context_id,
                "turn_id": event.turn_id,
                "stream_id": event.stream_id,
            }))
        } else {
            self.text(&format!(
                "{name} context {} turn {} stream {}",
                event.context_id, event.turn_id, event.stream_id
            ))
        }
    }

    fn stream_info(&self, info: &StreamInfo) -> anyhow::Result<()> {
        if self.json {
            self.line(&json!({
                "stream_id": info.stream_id,
                "context_id": info.context_id,
                "length": info.length,
                "type_tag": info.type_tag,
                "codec": codec_name(info.codec),
                "opened_at_unix_ms": info.opened_at_unix_ms,
                "updated_at_unix_ms": info.updated_at_unix_ms,
            }))
        } else {
            self.text(&format!(
                "stream {} {} bytes (context {})",
                info.stream_id, info.length, info.context_id
            ))
        }
    }
}
