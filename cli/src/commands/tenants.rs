//! `ctxstore tenant list|show` (decision 0032 §8): the tenants the server serves, with their
//! usage, quotas and refusals (TENANT_LIST, the operator's token); `tenant delete` erases one
//! (TENANT_DELETE, §6); `tenant rotate-key` gives one a new data key (TENANT_ROTATE_KEY, §7).
//! Creating and changing a tenant are edits of the tenants file and a SIGHUP
//! (docs/operations.md, *Tenants*).

use ctxstore_client::blocking::Client;
use ctxstore_client::{Tenant as TenantWire, tenant_deleted_flags, tenant_flags, tenant_rights};
use serde_json::{Value, json};

use crate::args::TenantCommand;
use crate::output::Output;

pub(crate) fn tenant(client: &Client, out: &Output, command: &TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::Delete { name } => return delete(client, out, name),
        TenantCommand::RotateKey { name } => return rotate_key(client, out, name),
        TenantCommand::List | TenantCommand::Show { .. } => {}
        TenantCommand::Create { .. } | TenantCommand::Quota { .. } => {
            unreachable!("`main` runs the tenants file's edits before connecting")
        }
    }
    let tenants = client.tenants()?;
    match command {
        TenantCommand::List => {
            if out.json {
                for tenant in &tenants {
                    out.line(&tenant_json(tenant))?;
                }
                Ok(())
            } else {
                out.text(&table(&tenants))
            }
        }
        TenantCommand::Show { name } => {
            let Some(tenant) = tenants.iter().find(|tenant| &tenant.name == name) else {
                anyhow::bail!(
                    "no tenant is named {name:?} on this server (`ctxstore tenant list` lists \
                     them)"
                );
            };
            if out.json {
                out.line(&tenant_json(tenant))
            } else {
                out.text(&details(tenant))
            }
        }
        TenantCommand::Delete { .. }
        | TenantCommand::RotateKey { .. }
        | TenantCommand::Create { .. }
        | TenantCommand::Quota { .. } => unreachable!("answered above"),
    }
}

/// `tenant rotate-key NAME`: TENANT_ROTATE_KEY, and the new version.
fn rotate_key(client: &Client, out: &Output, name: &str) -> anyhow::Result<()> {
    let rotated = client.rotate_tenant_key(name)?;
    if out.json {
        return out.line(&json!({
            "name": name,
            "tenant_id": rotated.tenant_id,
            "key_version": rotated.key_version,
        }));
    }
    out.text(&format!(
        "tenant {name} (id {}) seals its new payloads under data key version {}; what it \
         stored before keeps its version",
        rotated.tenant_id, rotated.key_version
    ))
}

/// `tenant delete NAME`: TENANT_DELETE, and what it did.
fn delete(client: &Client, out: &Output, name: &str) -> anyhow::Result<()> {
    let deleted = client.delete_tenant(name)?;
    let keys_destroyed = deleted.flags & tenant_deleted_flags::KEYS_DESTROYED != 0;
    let replica_updated = deleted.flags & tenant_deleted_flags::REPLICA_UPDATED != 0;
    if out.json {
        return out.line(&json!({
            "name": name,
            "tenant_id": deleted.tenant_id,
            "keys_destroyed": keys_destroyed,
            "replica_updated": replica_updated,
        }));
    }
    let mut lines = vec![format!(
        "tenant {name} (id {}) is deleted: its contexts are gone and its tokens refused",
        deleted.tenant_id
    )];
    lines.push(if keys_destroyed {
        "its keys are destroyed: none of its payloads opens again, in any copy".to_string()
    } else {
        "the server seals nothing (no --master-key-file): its payloads stay on the disk in \
         plain text until the next collection takes them"
            .to_string()
    });
    if replica_updated {
        lines.push("the object store holds the deletion: no restore brings it back".into());
    }
    out.text(&lines.join("\n"))
}

/// One tenant as `--json` prints it; a quota of `null` is no limit.
fn tenant_json(tenant: &TenantWire) -> Value {
    let limit = |value: u64| {
        if value == 0 {
            Value::Null
        } else {
            json!(value)
        }
    };
    json!({
        "name": tenant.name,
        "tenant_id": (tenant.tenant_id != 0).then_some(tenant.tenant_id),
        "in_tenants_file": tenant.flags & tenant_flags::IN_FILE != 0,
        "registered": tenant.flags & tenant_flags::REGISTERED != 0,
        "deleted": tenant.flags & tenant_flags::DELETED != 0,
        "rights": rights(tenant.rights),
        "contexts": tenant.contexts,
        "streams_open": tenant.streams_open,
        "stored_bytes": tenant.stored_bytes,
        "connections": tenant.connections,
        "quota_bytes": limit(tenant.quotas.bytes),
        "quota_contexts": limit(tenant.quotas.contexts),
        "quota_appends_per_s": limit(tenant.quotas.appends_per_s),
        "quota_connections": limit(tenant.quotas.connections),
        "quota_streams": limit(tenant.quotas.streams),
        "quota_refusals": tenant.refusals,
    })
}

fn rights(bits: u8) -> Vec<&'static str> {
    [
        (tenant_rights::READ, "read"),
        (tenant_rights::WRITE, "write"),
        (tenant_rights::ADMIN, "admin"),
    ]
    .into_iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

/// `used/limit`, or `used` without a limit.
fn of(used: u64, limit: u64) -> String {
    if limit == 0 {
        used.to_string()
    } else {
        format!("{used}/{limit}")
    }
}

/// One line per tenant under a header, columns aligned.
fn table(tenants: &[TenantWire]) -> String {
    let mut rows = vec![[
        "NAME".to_string(),
        "ID".into(),
        "CONTEXTS".into(),
        "STREAMS".into(),
        "STORED_BYTES".into(),
        "CONNECTIONS".into(),
        "APPENDS/S".into(),
        "REFUSALS".into(),
    ]];
    for tenant in tenants {
        let quotas = &tenant.quotas;
        let id = match tenant.tenant_id {
            0 => "-".to_string(),
            id => id.to_string(),
        };
        let appends = match quotas.appends_per_s {
            0 => "-".to_string(),
            limit => limit.to_string(),
        };
        let mut name = tenant.name.clone();
        if tenant.flags & tenant_flags::DELETED != 0 {
            name.push_str(" (deleted)");
        } else if tenant.flags & tenant_flags::IN_FILE == 0 {
            name.push_str(" (not in the tenants file)");
        }
        rows.push([
            name,
            id,
            of(tenant.contexts, quotas.contexts),
            of(tenant.streams_open, quotas.streams),
            of(tenant.stored_bytes, quotas.bytes),
            of(tenant.connections, quotas.connections),
            appends,
            tenant.refusals.to_string(),
        ]);
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect();
    lines.join("\n")
}

/// One `name value` line per field, aligned.
fn details(tenant: &TenantWire) -> String {
    let value = tenant_json(tenant);
    let Value::Object(fields) = value else {
        return String::new();
    };
    let width = fields.keys().map(String::len).max().unwrap_or(0);
    let lines: Vec<String> = fields
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::Null => "none".to_string(),
                Value::String(text) => text.clone(),
                Value::Array(items) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            format!("{name:<width$} {value}")
        })
        .collect();
    lines.join("\n")
}
