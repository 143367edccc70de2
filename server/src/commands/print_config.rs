//! `ctxstore-server --print-config`: the effective settings and their sources, checked.

use std::process::ExitCode;

use anyhow::Context;
use ctxstore_server::settings;

use super::server_config::config;
use crate::ServeArgs;

/// `--print-config`: the effective settings as TOML with their sources, then the same checks
/// a start makes (without opening the store or binding anything).
pub(crate) fn print_config(
    args: ServeArgs,
    effective: &[settings::Effective],
) -> anyhow::Result<ExitCode> {
    let config = match config(args) {
        Ok(config) => config,
        Err(error) => {
            print!("{}", settings::render(effective));
            return Err(error);
        }
    };
    // Settings left out that the server works out at start: show the values it will use.
    let mut effective = effective.to_vec();
    for setting in effective
        .iter_mut()
        .filter(|setting| setting.source == settings::Source::Unset)
    {
        let derived = match setting.key.as_str() {
            "network-cores" => Some((config.network_cores.to_string(), "one per CPU")),
            "shards" => Some((
                config.engine.shard_count.to_string(),
                "the store's own count, 1 for a new store",
            )),
            "placement" => Some((config.engine.placement.to_string(), "a thread per actor")),
            "connections-unauthenticated-max" => Some((
                config.limits.connections_unauthenticated_max.to_string(),
                "a quarter of connections-max",
            )),
            _ => None,
        };
        if let Some((value, reason)) = derived {
            setting.values = vec![value];
            setting.source = settings::Source::Derived(reason);
        }
    }
    print!("{}", settings::render(&effective));
    config
        .validate()
        .map_err(anyhow::Error::msg)
        .context("invalid configuration")?;
    Ok(ExitCode::SUCCESS)
}
