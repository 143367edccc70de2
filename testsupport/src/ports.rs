//! Ports for tests that bind an address again after closing it, or assert that a connect to a
//! closed one is refused.
//!
//! A port the kernel picked (`127.0.0.1:0`) is back in the ephemeral pool the moment it is
//! closed: any other listener of the test process binding `:0`, or any outgoing connect, may be
//! handed it in between, and then "refused after stop" or "the same address again" fails for a
//! reason that has nothing to do with the code under test (seen in CI: a connect to a stopped
//! metrics endpoint accepted by another test's server). The ports handed out here lie outside
//! the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), which neither
//! `bind(:0)` nor a connect's source port ever uses, and this process never hands one out twice.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many ports this process has handed out: the next pick starts past them.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// The lowest port handed out: below it lie the well-known and registered services.
const PORT_MIN: u32 = 10_000;

/// A loopback port that is free now and lies outside the ephemeral range; only a process that
/// binds it by number can take it. Panics (a test's setup) when none is free.
pub fn fixed_port() -> u16 {
    let (low, high) = ephemeral_range();
    // The larger gap of the two, below the range or above it.
    let below = (PORT_MIN, low.saturating_sub(1));
    let above = (high.saturating_add(1), 65_535_u32);
    let (first, last) = if below.1.saturating_sub(below.0) >= above.1.saturating_sub(above.0) {
        below
    } else {
        above
    };
    assert!(
        last > first,
        "no ports outside the ephemeral range {low}-{high}: narrow \
         net.ipv4.ip_local_port_range"
    );
    let span = last - first + 1;
    // Spread processes apart (a pid-dependent start), step by a prime that does not divide
    // the span so that every port is visited once.
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    let step = [7_919_u32, 7_927, 7_933]
        .into_iter()
        .find(|step| !span.is_multiple_of(*step))
        .unwrap_or(1);
    for _ in 0..span {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = first + (start + n.wrapping_mul(step)) % span;
        let port = u16::try_from(port).unwrap_or(u16::MAX);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {first}-{last}");
}

/// The kernel's ephemeral range; Linux's default when it cannot be read.
fn ephemeral_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut fields = text.split_whitespace().map(str::parse::<u32>);
            Some((fields.next()?.ok()?, fields.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_lie_outside_the_ephemeral_range_and_are_never_handed_out_twice() {
        let (low, high) = ephemeral_range();
        let ports: Vec<u16> = (0..64).map(|_| fixed_port()).collect();
        for port in &ports {
            let port = u32::from(*port);
            assert!(port < low || port > high, "{port} in {low}-{high}");
            assert!(port >= PORT_MIN.min(high + 1), "{port}");
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
    }
}
