//! `ctxstore-server verify`: a store checked offline.

use std::process::ExitCode;

use anyhow::Context;

pub(crate) fn verify(
    data: &std::path::Path,
    master_key: Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>,
) -> anyhow::Result<ExitCode> {
    let report = ctxstore_engine::verify_sealed(data, master_key)
        .with_context(|| format!("verifying {}", data.display()))?;
    println!("{report}");
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
