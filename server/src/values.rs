//! The values of the server's flags (clap value parsers): sizes and rates with units,
//! durations with `off`, the umask, the replication schedule and the shipper's priority.

use std::time::Duration;

use ctxstore_server::parse_duration;

/// A checkpoint schedule: by time or by bytes shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BaseInterval {
    Time(Duration),
    Bytes(u64),
}

pub(crate) fn parse_base_interval(text: &str) -> Result<BaseInterval, String> {
    if let Ok(duration) = parse_duration(text) {
        if duration < Duration::from_secs(1) {
            return Err(format!("{text:?}: a checkpoint interval is at least 1s"));
        }
        return Ok(BaseInterval::Time(duration));
    }
    match parse_rate(text) {
        Ok(bytes) if bytes >= 1 << 20 => Ok(BaseInterval::Bytes(bytes)),
        _ => Err(format!(
            "{text:?} is neither a duration (1h) nor a size of at least 1MiB (1GiB)"
        )),
    }
}

/// `local` or `remote` (`--ack-after`).
pub(crate) fn parse_ack_after(text: &str) -> Result<ctxstore_protocol::AckAfter, String> {
    match text.trim() {
        "local" => Ok(ctxstore_protocol::AckAfter::Local),
        "remote" => Ok(ctxstore_protocol::AckAfter::Remote),
        _ => Err(format!("{text:?}: --ack-after is local or remote")),
    }
}

/// `off` (zero), or a lease time of 2 s to 10 minutes (`--replica-lease`).
pub(crate) fn parse_replica_lease(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let lease = parse_duration(text)?;
    if !(Duration::from_secs(2)..=Duration::from_secs(600)).contains(&lease) {
        return Err(format!("{text:?}: the replica lease is 2s to 10m (or off)"));
    }
    Ok(lease)
}

/// How long a remote acknowledgement may wait: 100ms to 10 minutes.
pub(crate) fn parse_remote_ack_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if !(Duration::from_millis(100)..=Duration::from_secs(600)).contains(&timeout) {
        return Err(format!(
            "{text:?}: the remote acknowledgement timeout is 100ms to 10m"
        ));
    }
    Ok(timeout)
}

pub(crate) fn parse_replicate_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&interval) {
        return Err(format!("{text:?}: the replication interval is 10ms to 1h"));
    }
    Ok(interval)
}

/// `off` (keep everything) or a window of at least 1 minute.
pub(crate) fn parse_retention(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let window = parse_duration(text)?;
    if window < Duration::from_secs(60) {
        return Err(format!(
            "{text:?}: the replica retention is at least 1m (or off)"
        ));
    }
    Ok(window)
}

/// An RFC 3339 time as Unix milliseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Result<u64, String> {
    humantime::parse_rfc3339_weak(text.trim())
        .map_err(|_| format!("{text:?} is not a time like 2026-11-27T10:00:00Z"))?
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .map_err(|_| format!("{text:?} is before 1970"))
}

/// A chunk size or threshold: a byte count (units as `parse_size`) that fits in 32 bits.
pub(crate) fn parse_chunk_bytes(text: &str) -> Result<u64, String> {
    parse_size_u32(text).map(u64::from)
}

/// A byte count (units as `parse_size`) for a 32-bit setting: at most 4 GiB − 1 byte.
pub(crate) fn parse_size_u32(text: &str) -> Result<u32, String> {
    let bytes = parse_size(text)?;
    u32::try_from(bytes).map_err(|_| {
        format!(
            "{text:?} is over 4 GiB ({bytes} bytes; at most {} here)",
            u32::MAX
        )
    })
}

/// `--replica-nice`: N nice steps below the server (0..=19) or `idle`.
pub(crate) fn parse_ship_priority(text: &str) -> Result<ctxstore_replica::ShipPriority, String> {
    if text == "idle" {
        return Ok(ctxstore_replica::ShipPriority::Idle);
    }
    match text.parse::<u8>() {
        Ok(steps) if steps <= ctxstore_replica::ship::NICE_MAX => {
            Ok(ctxstore_replica::ShipPriority::Nice(steps))
        }
        _ => Err(format!(
            "{text:?} is neither a number of nice steps (0..=19) nor `idle`"
        )),
    }
}

/// A byte count with the units of `parse_rate` (`32MiB`, `200MB`, plain bytes), or
/// `off` / `0`.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    parse_rate(text).map_err(|_| format!("{text:?} is not a byte count (e.g. 512MiB, 2GiB, off)"))
}

/// A rate in bytes per second: a number with an optional unit (`KB`, `MB`, `GB`, powers of
/// 1000; `KiB`, `MiB`, `GiB`, powers of 1024), or `off` / `0` for no limit.
pub(crate) fn parse_rate(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if matches!(text, "off" | "none" | "0") {
        return Ok(0);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte rate (e.g. 64MiB, 200MB, off)"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (B, KB, MB, GB, KiB, MiB, GiB)"
            ));
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A context TTL: `off` (or `0`) for none, else a duration of at most 100 years.
pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let ttl = parse_duration(text)?;
    let max = Duration::from_millis(ctxstore_engine::config::TTL_MS_MAX);
    if ttl > max {
        return Err(format!(
            "a context TTL is at most 100 years; {text:?} is longer"
        ));
    }
    if ttl < Duration::from_millis(1) {
        return Err(format!(
            "a context TTL is at least 1ms (or off); got {text:?}"
        ));
    }
    Ok(ttl)
}

/// The garbage collector's interval: `off` (or `0`) for only on request, else a duration of
/// 1 ms to 30 days.
pub(crate) fn parse_gc_interval(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let interval = parse_duration(text)?;
    if interval > Duration::from_secs(30 * 24 * 3600) {
        return Err(format!(
            "the garbage collection interval is at most 30 days; {text:?} is longer"
        ));
    }
    if interval < Duration::from_millis(1) {
        return Err(format!(
            "the garbage collection interval is at least 1ms (or off); got {text:?}"
        ));
    }
    Ok(interval)
}

/// Parses an octal umask such as `077` or `0027`.
pub(crate) fn parse_umask(text: &str) -> Result<u32, String> {
    match u32::from_str_radix(text.trim(), 8) {
        Ok(mask) if mask <= 0o777 => Ok(mask),
        _ => Err(format!("{text:?} is not an octal umask like 077 or 027")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rate_takes_bytes_decimal_and_binary_units_and_off() {
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(parse_rate("off"), Ok(0));
        assert_eq!(parse_rate("none"), Ok(0));
        assert_eq!(parse_rate("12345"), Ok(12_345));
        assert_eq!(parse_rate("7B"), Ok(7));
        assert_eq!(parse_rate("3KB"), Ok(3_000));
        assert_eq!(parse_rate("200MB"), Ok(200_000_000));
        assert_eq!(parse_rate("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_rate("3KiB"), Ok(3 << 10));
        assert_eq!(parse_rate("64MiB"), Ok(64 << 20));
        assert_eq!(parse_rate("2GiB"), Ok(2 << 30));
        assert_eq!(parse_rate(" 32 MiB "), Ok(32 << 20));
        for bad in ["", "MiB", "1.5MiB", "-1", "12TiB", "12mib", "1 2"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} was accepted");
        }
        let overflow = parse_rate("18446744073709551615GiB").unwrap_err();
        assert!(overflow.contains("too large"), "{overflow}");
    }

    #[test]
    fn parse_size_takes_the_same_units_and_names_a_byte_count_in_its_error() {
        assert_eq!(parse_size("32MiB"), Ok(32 * 1024 * 1024));
        assert_eq!(parse_size("33554432"), Ok(33_554_432));
        assert_eq!(parse_size("off"), Ok(0));
        let error = parse_size("lots").unwrap_err();
        assert!(error.contains("not a byte count"), "{error}");
    }

    #[test]
    fn thirty_two_bit_sizes_are_range_checked() {
        assert_eq!(parse_size_u32("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size_u32("4294967295"), Ok(u32::MAX));
        let error = parse_size_u32("4GiB").unwrap_err();
        assert!(error.contains("over 4 GiB"), "{error}");
        assert!(parse_size_u32("4294967296").is_err());
        assert_eq!(parse_chunk_bytes("8KiB"), Ok(8192));
        assert!(parse_chunk_bytes("5GiB").is_err());
    }
}
