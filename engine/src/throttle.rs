//! Holds a background copy (an online backup, a pack compaction) to `bytes_per_s_max` on
//! average (0: no limit), for disks a full-speed copy would crowd: the copy shares the disk
//! with every append's fdatasync (docs/benchmarks.md, *Online backup* and *Garbage
//! collection*).

use std::time::{Duration, Instant};

pub(crate) struct Throttle {
    bytes_per_s_max: u64,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    pub fn new(bytes_per_s_max: u64) -> Throttle {
        Throttle {
            bytes_per_s_max,
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `bytes` copied; sleeps while the copy is ahead of its allowance.
    pub fn take(&mut self, bytes: u64) {
        self.bytes += bytes;
        if self.bytes_per_s_max == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_s_max as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}
