//! `ctxstore tenant create|quota` (decision 0032 §8): edits of the server's tenants file, the
//! one source of tokens, rights and quotas, made on the server's host with no connection. The
//! file is edited in place with its comments and layout kept (`toml_edit`), written whole
//! (a temporary file, synced, renamed over it, the directory synced) so the server never
//! reads half of it, and the server takes it on SIGHUP (`--reload-pid`). The server checks
//! the whole file again then; what is checked here is what this edit could get wrong.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use ctxstore_vocab::limits::is_tenant_name;
use serde_json::json;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, value};

use crate::args::{QuotaArgs, QuotaValue, TenantCommand, TenantRight, TenantsFileArgs};
use crate::output::Output;

/// The name no tenant may take: TenantId 0, the server's --token-file token's.
const OPERATOR_NAME: &str = "operator";
/// A new token's random bytes (printed as hex).
const TOKEN_RANDOM_BYTES: usize = 32;

/// The tenant commands that edit the tenants file, run before any connection: `None` for the
/// others (they ask the server).
pub(crate) fn edit(out: &Output, command: &TenantCommand) -> Option<anyhow::Result<()>> {
    match command {
        TenantCommand::Create {
            name,
            file,
            rights,
            quotas,
        } => Some(create(out, name, file, rights, quotas)),
        TenantCommand::Quota { name, file, quotas } => Some(quota(out, name, file, quotas)),
        _ => None,
    }
}

/// `tenant create NAME`: a new `[[tenant]]` table with a fresh token, printed once.
fn create(
    out: &Output,
    name: &str,
    file: &TenantsFileArgs,
    rights: &[TenantRight],
    quotas: &QuotaArgs,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        is_tenant_name(name) && name != OPERATOR_NAME,
        "{name:?} is not a tenant name: 1 to 64 bytes of a-z, 0-9, '_' and '-', not `operator`"
    );
    let path = &file.tenants_file;
    let mut document = read(path, true)?;
    anyhow::ensure!(
        find(&document, name).is_none(),
        "{} already has a tenant named {name:?} (`ctxstore tenant quota` changes its quotas)",
        path.display()
    );
    let mut random = [0_u8; TOKEN_RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(|error| anyhow::anyhow!("no random bytes: {error}"))?;
    let token: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    let digest = format!("blake3:{}", blake3::hash(token.as_bytes()).to_hex());

    let mut table = Table::new();
    table.insert("name", value(name));
    table.insert("tokens", value(toml_edit::Array::from_iter([digest])));
    let rights = [
        (TenantRight::Read, "read"),
        (TenantRight::Write, "write"),
        (TenantRight::Admin, "admin"),
    ]
    .into_iter()
    .filter(|(right, _)| rights.contains(right))
    .map(|(_, text)| text);
    table.insert("rights", value(toml_edit::Array::from_iter(rights)));
    set_quotas(&mut table, quotas);
    let tenants = document
        .entry("tenant")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let Some(tenants) = tenants.as_array_of_tables_mut() else {
        anyhow::bail!("{}: `tenant` is not `[[tenant]]` tables", path.display());
    };
    tenants.push(table);
    write(path, &document)?;
    reload(file)?;
    if out.json {
        return out.line(&json!({
            "name": name,
            "token": token,
            "tenants_file": path.display().to_string(),
            "reloaded": file.reload_pid.is_some(),
        }));
    }
    out.text(&format!(
        "tenant {name} added to {}\ntoken {token}\n(shown once: the file keeps only its \
         BLAKE3){}",
        path.display(),
        reload_hint(file)
    ))
}

/// `tenant quota NAME`: the quotas the flags name set or lifted, the rest of the file as it was.
fn quota(
    out: &Output,
    name: &str,
    file: &TenantsFileArgs,
    quotas: &QuotaArgs,
) -> anyhow::Result<()> {
    let changes = quota_keys(quotas)
        .filter(|(_, change)| change.is_some())
        .count();
    anyhow::ensure!(
        changes > 0,
        "name a quota to set or lift: --quota-bytes, --quota-contexts, --quota-appends-per-s, \
         --quota-connections or --quota-streams (a number, or `none`)"
    );
    let path = &file.tenants_file;
    let mut document = read(path, false)?;
    let Some(index) = find(&document, name) else {
        anyhow::bail!("{} has no tenant named {name:?}", path.display());
    };
    let table = document
        .get_mut("tenant")
        .and_then(Item::as_array_of_tables_mut)
        .and_then(|tenants| tenants.get_mut(index))
        .context("the tenant table vanished while being edited")?;
    set_quotas(table, quotas);
    let limits: serde_json::Map<String, serde_json::Value> = quota_keys(&QuotaArgs::default())
        .map(|(key, _)| {
            let limit = table.get(key).and_then(Item::as_integer);
            (key.to_string(), json!(limit))
        })
        .collect();
    write(path, &document)?;
    reload(file)?;
    if out.json {
        return out.line(&json!({"name": name, "quotas": limits}));
    }
    let lines: Vec<String> = limits
        .iter()
        .map(|(key, limit)| match limit.as_i64() {
            Some(limit) => format!("{key} = {limit}"),
            None => format!("{key}: none"),
        })
        .collect();
    out.text(&format!(
        "tenant {name} in {}:\n{}{}",
        path.display(),
        lines.join("\n"),
        reload_hint(file)
    ))
}

/// Every quota key of the file, with what the flags say of it.
fn quota_keys(quotas: &QuotaArgs) -> impl Iterator<Item = (&'static str, Option<QuotaValue>)> {
    [
        ("quota_bytes", quotas.quota_bytes),
        ("quota_contexts", quotas.quota_contexts),
        ("quota_appends_per_s", quotas.quota_appends_per_s),
        ("quota_connections", quotas.quota_connections),
        ("quota_streams", quotas.quota_streams),
    ]
    .into_iter()
}

fn set_quotas(table: &mut Table, quotas: &QuotaArgs) {
    for (key, change) in quota_keys(quotas) {
        match change {
            // `parse_quota` keeps a limit within a TOML integer.
            Some(QuotaValue::Limit(limit)) => {
                table.insert(key, value(i64::try_from(limit).unwrap_or(i64::MAX)));
            }
            Some(QuotaValue::None) => {
                table.remove(key);
            }
            None => {}
        }
    }
}

/// The file as a document; an absent one is empty when `create` (a first tenant).
fn read(path: &Path, create: bool) -> anyhow::Result<DocumentMut> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if create && error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", path.display()));
        }
    };
    text.parse::<DocumentMut>()
        .with_context(|| format!("{} is not TOML; nothing was changed", path.display()))
}

/// The index of the `[[tenant]]` table named `name`.
fn find(document: &DocumentMut, name: &str) -> Option<usize> {
    let tenants = document.get("tenant")?.as_array_of_tables()?;
    tenants
        .iter()
        .position(|table| table.get("name").and_then(Item::as_str) == Some(name))
}

/// `document` over `path`, whole: a temporary file beside it (owner-only: it names tokens'
/// digests and rights), synced, renamed over it, the directory synced.
fn write(path: &Path, document: &DocumentMut) -> anyhow::Result<()> {
    let directory = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .context("the tenants file has no file name")?;
    let temporary = directory.join(format!(".{}.editing", name.to_string_lossy()));
    let context = || format!("writing {}", temporary.display());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&temporary).with_context(context)?;
    out.write_all(document.to_string().as_bytes())
        .with_context(context)?;
    out.sync_all().with_context(context)?;
    drop(out);
    std::fs::rename(&temporary, path)
        .with_context(|| format!("renaming {} over {}", temporary.display(), path.display()))?;
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .with_context(|| format!("syncing {}", directory.display()))
}

/// SIGHUP to `--reload-pid`, if given.
fn reload(file: &TenantsFileArgs) -> anyhow::Result<()> {
    let Some(pid) = file.reload_pid else {
        return Ok(());
    };
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .context("running kill -HUP")?;
    anyhow::ensure!(
        status.success(),
        "the file is written, but kill -HUP {pid} failed ({status}): signal the server yourself"
    );
    Ok(())
}

fn reload_hint(file: &TenantsFileArgs) -> String {
    match file.reload_pid {
        Some(pid) => format!("\nthe server (pid {pid}) was told to read it again (SIGHUP)"),
        None => "\nthe server takes it on SIGHUP: kill -HUP $(pidof ctxstore-server)".into(),
    }
}
