//! Shared pieces of the benchmarks: latency summaries, the fdatasync floor. Workload text
//! comes from the load generator (`ctxstore_loadgen::workload::text`).

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod floor;
pub use ctxstore_loadgen::workload::text;

use hdrhistogram::Histogram;

/// p50/p90/p99/p999/max of a histogram recorded in nanoseconds, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct LatencyUs {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencyUs {
    pub fn of(histogram: &Histogram<u64>) -> LatencyUs {
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencyUs {
            p50: us(histogram.value_at_quantile(0.50)),
            p90: us(histogram.value_at_quantile(0.90)),
            p99: us(histogram.value_at_quantile(0.99)),
            p999: us(histogram.value_at_quantile(0.999)),
            max: us(histogram.max()),
        }
    }
}

impl std::fmt::Display for LatencyUs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.0} µs, p90 {:.0} µs, p99 {:.0} µs, p999 {:.0} µs, max {:.0} µs",
            self.p50, self.p90, self.p99, self.p999, self.max
        )
    }
}

/// A histogram for latencies from 1 ns to 60 s with 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 60_000_000_000, 3) {
        Ok(histogram) => histogram,
        Err(error) => panic!("histogram bounds are constants: {error}"),
    }
}
