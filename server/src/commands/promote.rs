//! `ctxstore-server promote`: a running standby made the primary.

use std::process::ExitCode;

use anyhow::Context;

/// `ctxstore-server promote`: the request file the running standby looks for, then its
/// answer.
pub(crate) fn promote(data: &std::path::Path, wait_s: u64) -> anyhow::Result<ExitCode> {
    use ctxstore_replica::follow::{PromotionAnswer, promotion_answer, request_promotion};
    let path = request_promotion(data).with_context(|| {
        format!(
            "requesting the promotion of the standby in {}",
            data.display()
        )
    })?;
    if wait_s == 0 {
        println!(
            "promotion requested ({}); the standby promotes itself at its next poll",
            path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_s);
    loop {
        match promotion_answer(data).context("reading the standby's answer")? {
            Some(PromotionAnswer::Promoted) => {
                println!("promoted: the standby in {} is the primary", data.display());
                return Ok(ExitCode::SUCCESS);
            }
            Some(PromotionAnswer::Refused(why)) => {
                eprintln!("promotion refused: {why}");
                return Ok(ExitCode::FAILURE);
            }
            None if std::time::Instant::now() >= deadline => {
                eprintln!(
                    "promotion requested ({}), but no answer within {wait_s} s: is a standby \
                     (--follow) running on {}? The request stays: it promotes at its next \
                     poll that applies everything shipped (its log says when).",
                    path.display(),
                    data.display()
                );
                return Ok(ExitCode::FAILURE);
            }
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}
