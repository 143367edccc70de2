//! The store's counters over the last minutes, for the console's charts of recent rates:
//! sampled every `sample_interval` while the console runs, the newest `SAMPLES_MAX` kept
//! (the front-end turns neighbouring samples into rates).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxstore_engine::StoreStats;

use super::Console;

/// Samples kept: 720, an hour at the default 5 s interval.
pub const SAMPLES_MAX: usize = 720;

/// One sample of the store's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub at_unix_ms: u64,
    pub stats: StoreStats,
}

/// The kept samples, oldest first.
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn push(&self, sample: Sample) {
        let mut samples = match self.samples.lock() {
            Ok(samples) => samples,
            Err(poisoned) => poisoned.into_inner(),
        };
        if samples.len() == SAMPLES_MAX {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    pub fn samples(&self) -> Vec<Sample> {
        match self.samples.lock() {
            Ok(samples) => samples.iter().copied().collect(),
            Err(poisoned) => poisoned.into_inner().iter().copied().collect(),
        }
    }
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// Samples the store every `interval` until the console stops (`Engine::stats` reads
/// atomics only: it runs on the console's own thread).
pub async fn sample(console: Arc<Console>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        console.history.push(Sample {
            at_unix_ms: now_unix_ms(),
            stats: console.engine.stats(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_samples_in_order() {
        let history = History::new();
        for at in 0..SAMPLES_MAX as u64 + 5 {
            history.push(Sample {
                at_unix_ms: at,
                stats: StoreStats::default(),
            });
        }
        let samples = history.samples();
        assert_eq!(samples.len(), SAMPLES_MAX);
        assert_eq!(samples[0].at_unix_ms, 5);
        assert_eq!(samples[SAMPLES_MAX - 1].at_unix_ms, SAMPLES_MAX as u64 + 4);
    }
}
