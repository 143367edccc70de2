//! A crash loop with streams (issue 32 item 5): a real `ctxstore-server` process, writers
//! streaming deltas on several streams (each from its own connection), `kill -9` at a random
//! moment, a restart on the same store, then the checks — every acknowledged delta is there,
//! in order, read from offset 0 (and no delta is torn: the durable bytes end on a delta's
//! boundary); the open streams are listed and a new connection continues them (the next
//! cycle's writers); a stream whose seal was acknowledged is an ordinary turn holding its
//! bytes. Verify is clean at the end. The engine's own crash tests copy a crash image; this
//! one kills the process.
//!
//! `CTXSTORE_STREAMS_CRASH_SEED` replays a run (the seed is printed); cycles: 24.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, NewStream, StreamState, blocking};
use ctxstore_testsupport::{ServerLaunch, TestServer, verified};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const CYCLES: usize = 24;
const SLOTS: usize = 4;
const CONTEXTS: usize = 2;
/// A stream is sealed after this many deltas (so most cycles seal some and open others).
const DELTAS_PER_STREAM: usize = 60;

/// xorshift64*: the run's randomness, replayable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Delta `index` of the stream in `slot` (its `generation`-th stream): 4 to 40 bytes that
/// name their place, so a byte out of order or from another stream cannot pass.
fn delta(slot: usize, generation: usize, index: usize) -> Bytes {
    let text = format!("<{slot}.{generation}.{index}{}>", "~".repeat(index % 30));
    Bytes::from(text)
}

/// The bytes of the first `count` deltas.
fn expected(slot: usize, generation: usize, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|index| delta(slot, generation, index).to_vec())
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seal {
    None,
    /// Sent; the answer did not come before the kill.
    InFlight,
    Acked(u64),
}

/// One writer's stream and what the writer knows of it.
#[derive(Debug)]
struct Slot {
    slot: usize,
    context: u64,
    generation: usize,
    stream_id: u64,
    /// Deltas acknowledged (durable by contract).
    acked: usize,
    /// A delta sent whose answer did not come: durable or not, never torn.
    in_flight: bool,
    seal: Seal,
    /// Turns this slot's sealed streams became, with their bytes.
    sealed: Vec<(u64, Vec<u8>)>,
    /// Deltas acknowledged over the whole run.
    acked_total: usize,
}

fn connect(server: &TestServer) -> blocking::Client {
    let config =
        ClientConfig::new(server.addr.clone()).with_request_timeout(Some(Duration::from_secs(20)));
    blocking::Client::connect(config).expect("connect to the restarted server")
}

fn start(data: &Path) -> TestServer {
    ServerLaunch::new(SERVER)
        .data(data)
        .flags(&["--network-cores", "1", "--no-preallocate"])
        .keep_log()
        .start()
}

fn open(client: &blocking::Client, slot: &mut Slot) {
    let info = client
        .open_stream(slot.context, NewStream::new(slot.slot as u64, 1))
        .expect("open a stream");
    assert_eq!((info.context_id, info.length), (slot.context, 0));
    slot.stream_id = info.stream_id;
    slot.acked = 0;
    slot.in_flight = false;
    slot.seal = Seal::None;
}

/// Streams deltas (at the stream's length: AT_OFFSET) until the server dies or `stop`; seals
/// a stream after `DELTAS_PER_STREAM` and opens the next.
fn write(client: blocking::Client, mut slot: Slot, stop: Arc<AtomicBool>) -> Slot {
    while !stop.load(Ordering::Relaxed) {
        if slot.acked == DELTAS_PER_STREAM {
            slot.seal = Seal::InFlight;
            let Ok(appended) = client.seal_stream(slot.stream_id) else {
                return slot;
            };
            let bytes = expected(slot.slot, slot.generation, slot.acked);
            assert_eq!(appended.turn.payload_len as usize, bytes.len());
            slot.seal = Seal::Acked(appended.turn.turn_id);
            slot.sealed.push((appended.turn.turn_id, bytes));
            slot.generation += 1;
            let Ok(info) = client.open_stream(slot.context, NewStream::new(slot.slot as u64, 1))
            else {
                // The open's record may or may not be durable: a stream nobody writes again
                // (listed, then aborted by the idle timeout); this slot starts a new one.
                slot.stream_id = 0;
                return slot;
            };
            slot.stream_id = info.stream_id;
            slot.acked = 0;
            slot.seal = Seal::None;
            continue;
        }
        let offset = expected(slot.slot, slot.generation, slot.acked).len() as u64;
        let bytes = delta(slot.slot, slot.generation, slot.acked);
        let len = bytes.len() as u64;
        slot.in_flight = true;
        match client.append_delta(slot.stream_id, Some(offset), bytes) {
            Ok(length) => {
                assert_eq!(length, offset + len, "stream {}", slot.stream_id);
                slot.acked += 1;
                slot.acked_total += 1;
                slot.in_flight = false;
            }
            Err(_) => return slot, // the server died under the request
        }
    }
    slot
}

/// What the kills caught in flight: deltas sent and unanswered, and of those the ones that
/// were durable all the same (both outcomes are correct; the counts show the loop hit them).
#[derive(Debug, Default)]
struct Caught {
    deltas_in_flight: usize,
    deltas_in_flight_durable: usize,
    seals_in_flight: usize,
}

/// After a restart: the store holds what each writer was told, no more than it sent, never a
/// torn delta; the open streams are listed; acknowledged seals are turns with their bytes.
fn check(client: &blocking::Client, slots: &mut [Slot], cycle: usize, caught: &mut Caught) {
    for slot in slots.iter_mut() {
        for (turn_id, bytes) in &slot.sealed {
            let turn = client.turn(*turn_id).expect("a sealed turn survives");
            assert_eq!(turn.context_id, slot.context);
            assert_eq!(&client.blob(turn.payload_hash).unwrap()[..], &bytes[..]);
        }
        if slot.stream_id == 0 {
            open(client, slot);
            continue;
        }
        let chunk = client
            .read_stream(slot.stream_id, 0, u32::MAX, None)
            .expect("the stream survives the crash");
        match chunk.state {
            StreamState::Open => {
                assert!(
                    !matches!(slot.seal, Seal::Acked(_)),
                    "cycle {cycle}: stream {} was sealed (acknowledged) yet is open",
                    slot.stream_id
                );
                let durable = &chunk.bytes[..];
                let most = slot.acked + usize::from(slot.in_flight);
                let count = (slot.acked..=most)
                    .find(|count| expected(slot.slot, slot.generation, *count) == durable)
                    .unwrap_or_else(|| {
                        panic!(
                            "cycle {cycle}: stream {} holds {} bytes, not the {} acknowledged \
                             deltas (or one more): {:?}",
                            slot.stream_id,
                            durable.len(),
                            slot.acked,
                            String::from_utf8_lossy(durable)
                        )
                    });
                assert_eq!(chunk.length as usize, durable.len());
                if slot.in_flight {
                    caught.deltas_in_flight += 1;
                    caught.deltas_in_flight_durable += usize::from(count > slot.acked);
                }
                caught.seals_in_flight += usize::from(slot.seal == Seal::InFlight);
                slot.acked = count;
                slot.in_flight = false;
                slot.seal = Seal::None;
            }
            StreamState::Sealed(turn_id) => {
                assert!(
                    matches!(slot.seal, Seal::InFlight | Seal::Acked(_)),
                    "cycle {cycle}: stream {} sealed without a seal sent",
                    slot.stream_id
                );
                if let Seal::Acked(acked) = slot.seal {
                    assert_eq!(acked, turn_id);
                }
                let bytes = expected(slot.slot, slot.generation, slot.acked);
                let turn = client.turn(turn_id).unwrap();
                assert_eq!(&client.blob(turn.payload_hash).unwrap()[..], &bytes[..]);
                if slot.seal == Seal::InFlight {
                    caught.seals_in_flight += 1;
                    slot.sealed.push((turn_id, bytes));
                    slot.generation += 1;
                }
                open(client, slot);
            }
            StreamState::Aborted => panic!("cycle {cycle}: stream {} aborted", slot.stream_id),
        }
    }
    // Every slot's open stream is listed with its length; streams whose open record became
    // durable without an answer are listed too, empty (nobody writes them).
    for context in slots
        .iter()
        .map(|slot| slot.context)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let listed = client.open_streams(context, 0, 1024).unwrap();
        for slot in slots.iter().filter(|slot| slot.context == context) {
            let info = listed
                .iter()
                .find(|info| info.stream_id == slot.stream_id)
                .unwrap_or_else(|| panic!("cycle {cycle}: stream {} not listed", slot.stream_id));
            assert_eq!(
                info.length as usize,
                expected(slot.slot, slot.generation, slot.acked).len()
            );
        }
        for info in &listed {
            assert!(
                slots.iter().any(|slot| slot.stream_id == info.stream_id) || info.length == 0,
                "cycle {cycle}: stream {} listed with {} bytes nobody wrote",
                info.stream_id,
                info.length
            );
        }
    }
}

#[test]
fn every_acknowledged_delta_survives_kill_9_and_the_streams_go_on() {
    let seed = std::env::var("CTXSTORE_STREAMS_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("streams crash loop: CTXSTORE_STREAMS_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let began = Instant::now();

    let mut server = start(&data);
    let setup = connect(&server);
    let contexts: Vec<u64> = (0..CONTEXTS)
        .map(|_| setup.create_context().unwrap().context_id)
        .collect();
    let mut slots: Vec<Slot> = (0..SLOTS)
        .map(|slot| {
            let mut state = Slot {
                slot,
                context: contexts[slot % CONTEXTS],
                generation: 0,
                stream_id: 0,
                acked: 0,
                in_flight: false,
                seal: Seal::None,
                sealed: Vec::new(),
                acked_total: 0,
            };
            open(&setup, &mut state);
            state
        })
        .collect();
    drop(setup);

    let mut caught = Caught::default();
    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = slots
            .drain(..)
            .map(|slot| {
                // A new connection per cycle: it takes the open stream over.
                let client = connect(&server);
                let stop = Arc::clone(&stop);
                thread::spawn(move || write(client, slot, stop))
            })
            .collect();
        thread::sleep(Duration::from_millis(20 + rng.below(180)));
        server.kill(); // kill -9, mid-stream
        stop.store(true, Ordering::Relaxed);
        slots = writers
            .into_iter()
            .map(|writer| writer.join().expect("a writer panicked"))
            .collect();

        server = start(&data);
        let client = connect(&server);
        check(&client, &mut slots, cycle, &mut caught);
    }

    // The end: every open stream sealed into a turn with its bytes, then a clean verify.
    let client = connect(&server);
    for slot in &mut slots {
        let appended = client.seal_stream(slot.stream_id).unwrap();
        let bytes = expected(slot.slot, slot.generation, slot.acked);
        assert_eq!(
            &client.blob(appended.turn.payload_hash).unwrap()[..],
            &bytes[..]
        );
        slot.sealed.push((appended.turn.turn_id, bytes));
    }
    let sealed: usize = slots.iter().map(|slot| slot.sealed.len()).sum();
    let deltas_acked_total: usize = slots.iter().map(|slot| slot.acked_total).sum();
    assert!(
        sealed > SLOTS,
        "some streams were sealed mid-run ({sealed})"
    );
    drop(client);
    server.stop(Duration::from_secs(20)).unwrap();
    let report = verified(Path::new(SERVER), &data);
    assert!(report.contains("verdict   OK"), "{report}");
    // Most kills land while writers wait for an answer (here about 90 of 96): the loop tests
    // the crash, not a pause. Half a kill per cycle leaves room for a loaded machine.
    assert!(
        caught.deltas_in_flight >= CYCLES / 2,
        "only {caught:?} of {CYCLES} kills caught a delta in flight"
    );
    eprintln!(
        "streams crash loop: {CYCLES} kills, {deltas_acked_total} deltas acknowledged, \
         {sealed} streams sealed, {caught:?}, {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
