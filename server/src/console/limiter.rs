//! How many wrong tokens the console takes from one address (issue 44 item 14): the first
//! `login_failures_free_max` are answered as they come; after those, each further wrong token
//! makes the address wait, `login_wait_min` and then twice as long each time, up to
//! `login_wait_max`. While an address waits, every token it sends (the right one too) is
//! answered `429` with `Retry-After`, unchecked: a waiting address learns nothing, so a
//! guesser gets a handful of tries, then a few an hour. The right token clears the address's
//! count; a count is forgotten `login_failures_forget_after` after its last wrong token.
//!
//! Bounded memory: at most `login_addresses_max` addresses are tracked (only those that sent
//! a wrong token); past that, the forgotten ones make room, and while none is forgotten, new
//! addresses share one count (a guesser with many addresses is limited as one). An IPv6
//! address counts by its /64, which one host usually holds whole. Behind a reverse proxy every
//! browser comes from the proxy's address and shares its count.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::ConsoleLimits;

/// Whose wrong tokens are counted together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sender {
    /// An IPv4 address, or an IPv6 /64.
    Address(IpAddr),
    /// Every address that found the table full.
    Overflow,
}

impl Sender {
    fn of(ip: IpAddr) -> Sender {
        Sender::Address(match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
            v4 => v4,
        })
    }
}

/// One sender's wrong tokens.
#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    last: Instant,
    /// No token is checked before this.
    blocked_until: Instant,
}

/// The wrong tokens of every address that sent one lately.
pub(super) struct LoginLimiter {
    limits: ConsoleLimits,
    senders: Mutex<HashMap<Sender, Failures>>,
}

impl LoginLimiter {
    pub(super) fn new(limits: ConsoleLimits) -> LoginLimiter {
        LoginLimiter {
            limits,
            senders: Mutex::new(HashMap::new()),
        }
    }

    /// Checks a token `ip` sent at `now` with `right`, unless the address must wait: then
    /// `Err(how long)`, and `right` is not called. A wrong token is counted, a right one
    /// clears the count.
    pub(super) fn check(
        &self,
        ip: IpAddr,
        now: Instant,
        right: impl FnOnce() -> bool,
    ) -> Result<bool, Duration> {
        let mut senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = self.sender(&mut senders, Sender::of(ip), now);
        let failures = senders.get(&sender).copied().filter(|failures| {
            now.saturating_duration_since(failures.last) < self.limits.login_failures_forget_after
        });
        if let Some(failures) = failures
            && failures.blocked_until > now
        {
            return Err(failures.blocked_until - now);
        }
        if right() {
            senders.remove(&sender);
            return Ok(true);
        }
        let count = failures
            .map_or(0, |failures| failures.count)
            .saturating_add(1);
        let blocked_until = now + self.wait_after(count);
        senders.insert(
            sender,
            Failures {
                count,
                last: now,
                blocked_until,
            },
        );
        Ok(false)
    }

    /// How long an address waits after its `count`-th wrong token in a row.
    fn wait_after(&self, count: u32) -> Duration {
        let limits = &self.limits;
        let Some(over) = count.checked_sub(limits.login_failures_free_max) else {
            return Duration::ZERO;
        };
        let doubled = 1u32.checked_shl(over).unwrap_or(u32::MAX);
        limits
            .login_wait_min
            .saturating_mul(doubled)
            .min(limits.login_wait_max)
    }

    /// Where `sender`'s wrong tokens are counted: its own entry when it has one or there is
    /// room (forgotten entries make room), else the shared one.
    fn sender(
        &self,
        senders: &mut HashMap<Sender, Failures>,
        sender: Sender,
        now: Instant,
    ) -> Sender {
        let addresses_max = self.limits.login_addresses_max.max(1);
        if senders.contains_key(&sender) || senders.len() < addresses_max {
            return sender;
        }
        let forget_after = self.limits.login_failures_forget_after;
        senders.retain(|_, failures| {
            now.saturating_duration_since(failures.last) < forget_after
                || failures.blocked_until > now
        });
        // The shared entry is one of them: the table holds at most `addresses_max` + 1.
        if senders.len() < addresses_max {
            sender
        } else {
            Sender::Overflow
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.senders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConsoleLimits {
        ConsoleLimits {
            login_failures_free_max: 3,
            login_wait_min: Duration::from_secs(1),
            login_wait_max: Duration::from_secs(10),
            login_failures_forget_after: Duration::from_secs(60),
            login_addresses_max: 4,
            ..ConsoleLimits::default()
        }
    }

    const WRONG: fn() -> bool = || false;
    const RIGHT: fn() -> bool = || true;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn free_tries_then_doubling_waits_up_to_the_maximum() {
        let limiter = LoginLimiter::new(limits());
        let guesser = ip("192.0.2.1");
        let mut now = Instant::now();
        for _ in 0..2 {
            assert_eq!(limiter.check(guesser, now, WRONG), Ok(false));
        }
        // The third wrong token is answered, and makes the address wait.
        assert_eq!(limiter.check(guesser, now, WRONG), Ok(false));
        let mut waits = Vec::new();
        for _ in 0..6 {
            let wait = limiter.check(guesser, now, RIGHT).unwrap_err();
            // Nothing is checked while it waits, the right token neither.
            assert_eq!(
                limiter.check(guesser, now, || panic!("checked while waiting")),
                Err(wait)
            );
            waits.push(wait.as_secs());
            now += wait;
            assert_eq!(limiter.check(guesser, now, WRONG), Ok(false));
        }
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        // Another address is not held up by it.
        assert_eq!(limiter.check(ip("192.0.2.2"), now, RIGHT), Ok(true));
        // Once the wait is over, the right token clears the count.
        now += Duration::from_secs(10);
        assert_eq!(limiter.check(guesser, now, RIGHT), Ok(true));
        for _ in 0..2 {
            assert_eq!(limiter.check(guesser, now, WRONG), Ok(false));
        }
    }

    #[test]
    fn a_count_is_forgotten_and_ipv6_counts_by_its_64() {
        let limiter = LoginLimiter::new(limits());
        let mut now = Instant::now();
        for host in ["2001:db8::1", "2001:db8::2", "2001:db8::ffff:3"] {
            assert_eq!(limiter.check(ip(host), now, WRONG), Ok(false));
        }
        assert!(limiter.check(ip("2001:db8::4"), now, RIGHT).is_err());
        assert!(
            limiter.check(ip("2001:db8:0:1::4"), now, RIGHT).unwrap(),
            "another /64"
        );
        now += Duration::from_secs(61);
        for _ in 0..2 {
            assert_eq!(limiter.check(ip("2001:db8::1"), now, WRONG), Ok(false));
        }
        // An IPv4 address mapped into IPv6 is that IPv4 address.
        assert_eq!(limiter.check(ip("192.0.2.9"), now, WRONG), Ok(false));
        assert_eq!(limiter.check(ip("::ffff:192.0.2.9"), now, WRONG), Ok(false));
        assert_eq!(limiter.check(ip("192.0.2.9"), now, WRONG), Ok(false));
        assert!(limiter.check(ip("192.0.2.9"), now, RIGHT).is_err());
    }

    #[test]
    fn a_full_table_makes_new_addresses_share_one_count() {
        let limiter = LoginLimiter::new(limits());
        let mut now = Instant::now();
        // Four addresses fill the table.
        for host in 1..=4 {
            let address = ip(&format!("198.51.100.{host}"));
            assert_eq!(limiter.check(address, now, WRONG), Ok(false));
        }
        // Every further address counts as one: three wrong tokens from three of them, and
        // a fourth waits.
        for host in 10..13 {
            let address = ip(&format!("198.51.100.{host}"));
            assert_eq!(limiter.check(address, now, WRONG), Ok(false));
        }
        assert!(limiter.check(ip("198.51.100.20"), now, RIGHT).is_err());
        assert_eq!(limiter.tracked(), 5, "four addresses and the shared count");
        // The tracked ones keep their own counts.
        assert_eq!(limiter.check(ip("198.51.100.1"), now, RIGHT), Ok(true));
        // Forgotten entries make room again.
        now += Duration::from_secs(61);
        assert_eq!(limiter.check(ip("198.51.100.30"), now, WRONG), Ok(false));
        assert_eq!(limiter.tracked(), 1);
        assert_eq!(limiter.check(ip("198.51.100.30"), now, WRONG), Ok(false));
        assert_eq!(limiter.check(ip("198.51.100.31"), now, RIGHT), Ok(true));
    }
}
