//! What zstd costs on 10 KiB chat-like payloads, per level and parameter, on this machine:
//! the measurement behind the small-payload tuning in `ctxstore_engine`'s blob codec.
//!
//! `cargo run --release -p ctxstore-benches --example zstd_params` prints, for each variant,
//! the best of five passes over 2,000 distinct payloads (µs per payload) and the ratio, then
//! BLAKE3 and inflate times for comparison.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::time::Instant;

use ctxstore_benches::text::ChatText;
use zstd::zstd_safe::CParameter;

const PAYLOAD_BYTES: usize = 10 * 1024;
const PAYLOAD_COUNT: usize = 2_000;
const PASSES: usize = 5;

fn main() {
    let mut text = ChatText::new(7);
    let payloads: Vec<Vec<u8>> = (0..PAYLOAD_COUNT)
        .map(|_| text.payload(PAYLOAD_BYTES))
        .collect();
    let variants: &[(&str, i32, &[CParameter])] = &[
        ("level 1 (zstd's own choice)", 1, &[]),
        ("level 2", 2, &[]),
        ("level 3", 3, &[]),
        ("level -1", -1, &[]),
        ("level 1, hash log 12", 1, &[CParameter::HashLog(12)]),
        ("level 1, min match 6", 1, &[CParameter::MinMatch(6)]),
        (
            "level 1, hash log 12, min match 6 (engine)",
            1,
            &[CParameter::HashLog(12), CParameter::MinMatch(6)],
        ),
        (
            "level 1, hash log 12, min match 7",
            1,
            &[CParameter::HashLog(12), CParameter::MinMatch(7)],
        ),
    ];
    for (name, level, parameters) in variants {
        let mut compressor = zstd::bulk::Compressor::new(*level).unwrap();
        for parameter in *parameters {
            compressor.set_parameter(*parameter).unwrap();
        }
        let mut best_us = f64::MAX;
        let mut stored_bytes = 0;
        for _ in 0..PASSES {
            let started = Instant::now();
            stored_bytes = 0;
            for payload in &payloads {
                stored_bytes += compressor.compress(payload).unwrap().len();
            }
            best_us = best_us.min(per_payload_us(started));
        }
        let ratio = (PAYLOAD_COUNT * PAYLOAD_BYTES) as f64 / stored_bytes as f64;
        println!("{name:44} {best_us:6.1} µs per 10 KiB, ratio {ratio:.2}");
    }

    let started = Instant::now();
    for payload in &payloads {
        std::hint::black_box(blake3::hash(payload));
    }
    println!(
        "{:44} {:6.1} µs per 10 KiB",
        "BLAKE3",
        per_payload_us(started)
    );

    let compressed: Vec<Vec<u8>> = payloads
        .iter()
        .map(|payload| zstd::bulk::compress(payload, 1).unwrap())
        .collect();
    let mut decompressor = zstd::bulk::Decompressor::new().unwrap();
    let started = Instant::now();
    for body in &compressed {
        std::hint::black_box(decompressor.decompress(body, PAYLOAD_BYTES).unwrap());
    }
    println!(
        "{:44} {:6.1} µs per 10 KiB",
        "inflate (level 1)",
        per_payload_us(started)
    );
}

fn per_payload_us(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6 / PAYLOAD_COUNT as f64
}
