//! What counting one request costs a network core: `CoreMetrics::clock` + `answered` (two
//! clock reads, a type lookup, a counter, a histogram bucket), on and off, in a tight loop.
//! The per-request figure to set against a request's CPU time (benches/results/HISTORY.md#metrics-overhead).
//!
//!   cargo run --release -p ctxstore-server --example metrics_cost

use std::hint::black_box;
use std::time::Instant;

use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminResponse, ErrorCode, MessageType, Response};
use ctxstore_server::metrics::CoreMetrics;

fn main() {
    const REQUESTS: u32 = 20_000_000;
    let ok = Response::Admin(AdminResponse::Pong(admin::Pong { nonce: 7 }));
    let failed = Response::error(ErrorCode::NotFound, "no such context");
    for enabled in [false, true, false, true] {
        let metrics = CoreMetrics::new(Default::default(), enabled);
        let started = Instant::now();
        for index in 0..REQUESTS {
            let begun = black_box(&metrics).clock();
            let response = if index % 16 == 0 { &failed } else { &ok };
            let msg_type = if index % 2 == 0 {
                MessageType::GetLast
            } else {
                MessageType::AppendTurn
            };
            metrics.answered(black_box(msg_type.code()), black_box(response), begun);
        }
        let per_request = started.elapsed().as_nanos() as f64 / f64::from(REQUESTS);
        println!(
            "counting {}: {per_request:.1} ns per request",
            if enabled { "on " } else { "off" }
        );
    }
}
