//! The long power-loss campaign (issue 36): `tests/power_loss.rs`'s run, many seeds, in
//! release. Prints the figures and every failing seed (with the cut that led there), and
//! exits non-zero if any failed.
//!
//! ```text
//! nice -n 10 cargo run --release -p ctxstore-engine --example power_loss_campaign -- \
//!     --cuts 100000 [--first-seed 0] [--cuts-per-seed 25]
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/power_loss_support/mod.rs"]
mod power_loss_support;

use power_loss_support::{Figures, run_seed_watched};

fn main() {
    let mut cuts_wanted = 100_000u64;
    let mut first_seed = 0u64;
    let mut cuts_per_seed = 25u64;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|value| value.parse().ok());
        match (flag.as_str(), value) {
            ("--cuts", Some(value)) => cuts_wanted = value,
            ("--first-seed", Some(value)) => first_seed = value,
            ("--cuts-per-seed", Some(value)) => cuts_per_seed = value,
            _ => {
                eprintln!(
                    "usage: power_loss_campaign [--cuts N] [--first-seed S] [--cuts-per-seed C]"
                );
                std::process::exit(2);
            }
        }
    }
    let started = std::time::Instant::now();
    let mut figures = Figures::default();
    let mut failures = Vec::new();
    let mut seed = first_seed;
    while figures.cuts < cuts_wanted {
        let cuts_before = figures.cuts;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_seed_watched(
                seed,
                cuts_per_seed,
                &mut figures,
                std::time::Duration::from_secs(600),
            )
        }));
        match run {
            Ok(Ok(())) => {}
            Ok(Err(failure)) => {
                println!("FAILED {failure}");
                failures.push(seed);
            }
            Err(_) => {
                println!("FAILED seed {seed}: panicked (above)");
                failures.push(seed);
                // A panicking seed stops before counting its cuts: count them, so the run ends.
                figures.cuts += cuts_per_seed;
            }
        }
        if figures.cuts / 1000 > cuts_before / 1000 {
            println!(
                "{} cuts, seeds {first_seed}..={seed}, {} failed, {:.0} s: {figures:?}",
                figures.cuts,
                failures.len(),
                started.elapsed().as_secs_f64()
            );
        }
        seed += 1;
    }
    println!(
        "done: seeds {first_seed}..{seed} ({} cuts per seed), {:.0} s\n{figures:#?}\nfailed seeds: {failures:?}",
        cuts_per_seed,
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
