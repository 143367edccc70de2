//! The fdatasync floor: what one small durable write costs on this machine, measured the way
//! the brief states it (4 KiB appended to a file, then fdatasync).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use crate::latency_histogram;

/// Appends `count` writes of `bytes` to a new file in `dir`, each followed by fdatasync.
/// Returns the latency histogram in nanoseconds.
pub fn append_fdatasync(
    dir: &Path,
    bytes: usize,
    count: usize,
) -> std::io::Result<hdrhistogram::Histogram<u64>> {
    let path = dir.join("fdatasync-floor.bin");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = vec![0x5a_u8; bytes];
    let mut histogram = latency_histogram();
    for _ in 0..count {
        let started = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        let _ = histogram.record(started.elapsed().as_nanos() as u64);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(histogram)
}

/// Overwrites `count` blocks of a file that was filled with zeros and synced beforehand
/// (no size change, no block allocation), each followed by fdatasync.
pub fn overwrite_fdatasync(
    dir: &Path,
    bytes: usize,
    count: usize,
) -> std::io::Result<hdrhistogram::Histogram<u64>> {
    let path = dir.join("fdatasync-floor-prefilled.bin");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    file.write_all_at(&vec![0u8; bytes * count], 0)?;
    file.sync_all()?;
    let block = vec![0x5a_u8; bytes];
    let mut histogram = latency_histogram();
    for index in 0..count {
        let started = Instant::now();
        file.write_all_at(&block, (index * bytes) as u64)?;
        file.sync_data()?;
        let _ = histogram.record(started.elapsed().as_nanos() as u64);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(histogram)
}
