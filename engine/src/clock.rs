//! The boot clock: the one clock every deadline of decision 0031 is measured on (the ack
//! gate's, `status.rs`; the lease's and the shipper's, in the replica; the server's last
//! check before the socket).
//!
//! `CLOCK_BOOTTIME`, read through rustix (a vDSO call on Linux, no system call): nanoseconds
//! since the machine booted, counting the time it spent suspended, and never stepped with the
//! wall clock (NTP, `date -s`). Not `std::time::Instant`: on Linux that is `CLOCK_MONOTONIC`,
//! which stops while the machine is suspended, so a primary resumed from suspend would believe
//! no time had passed and keep acknowledging on a lease another server has taken since.
//!
//! A reading means something only on the machine that took it: deadlines are never sent to
//! another machine nor compared with its readings (decision 0031 §5). Code that decides by a
//! deadline takes the time as an argument (`AckGate::open_at`), so that tests drive it with a
//! fake clock; only the live path calls `boot_now_ns`.

use rustix::time::{ClockId, clock_gettime};

/// Nanoseconds since boot on `CLOCK_BOOTTIME` (suspended time included). Never 0 and never
/// `u64::MAX` on a running machine (that would be 584 years of uptime), so both can mean
/// "closed" and "no deadline" in a deadline.
pub fn boot_now_ns() -> u64 {
    let now = clock_gettime(ClockId::Boottime);
    // A boot clock is never negative; a u64 of nanoseconds lasts 584 years.
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000)
        .saturating_add(nanos)
        .max(1)
}

/// `ns` as whole milliseconds, rounded up: a deadline 1 ns away is still 1 ms open, never 0
/// (which ROLE reads as closed).
pub fn ns_to_ms_ceil(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_never_goes_back_and_counts_at_least_the_monotonic_time() {
        let monotonic = clock_gettime(ClockId::Monotonic);
        let monotonic_ns = monotonic.tv_sec as u64 * 1_000_000_000 + monotonic.tv_nsec as u64;
        let first = boot_now_ns();
        // CLOCK_BOOTTIME is CLOCK_MONOTONIC plus the time suspended.
        assert!(first >= monotonic_ns, "{first} < {monotonic_ns}");
        let mut last = first;
        for _ in 0..1000 {
            let now = boot_now_ns();
            assert!(now >= last, "the boot clock went back: {now} < {last}");
            last = now;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(boot_now_ns() - first >= 5_000_000);
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(ns_to_ms_ceil(0), 0);
        assert_eq!(ns_to_ms_ceil(1), 1);
        assert_eq!(ns_to_ms_ceil(1_000_000), 1);
        assert_eq!(ns_to_ms_ceil(1_000_001), 2);
        assert_eq!(ns_to_ms_ceil(u64::MAX), u64::MAX.div_ceil(1_000_000));
    }
}
