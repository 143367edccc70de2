//! `kv put/get/rm/list/touch`: a context's key-value entries, with their time to live
//! (protocol version 3) where the server has it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{BlobHash, ContextRef, KvItem};
use serde_json::json;

use crate::args::KvCommand;
use crate::exits::NoSuchKey;
use crate::output::Output;
use crate::output::readable;
use crate::output::write_stdout;

/// `kv …`: a context's key-value entries. `value` is what `kv put` read before connecting.
pub(crate) fn kv(
    client: &Client,
    out: &Output,
    command: &KvCommand,
    value: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    match command {
        KvCommand::Put {
            context,
            key,
            if_absent,
            ttl,
            index,
            vector,
            ..
        } => {
            let rows: Vec<Vec<f32>> = vector.iter().map(|arg| arg.0.clone()).collect();
            let vectors = index.as_deref().map(|index| (index, rows.as_slice()));
            put(
                client,
                out,
                context,
                key,
                (*if_absent, *ttl),
                vectors,
                value,
            )
        }
        KvCommand::Get {
            context,
            key,
            output,
            refresh,
            entry,
        } => get(client, out, context, key, output.as_ref(), *refresh, *entry),
        KvCommand::Touch { context, keys, ttl } => {
            let keys = keys
                .iter()
                .map(|key| Bytes::from(key.clone().into_encoded_bytes()))
                .collect();
            for item in client.kv_touch(context.clone(), keys, *ttl)? {
                out.kv_item(&item)?;
            }
            Ok(())
        }
        KvCommand::Rm { context, key } => rm(client, out, context, key),
        KvCommand::List {
            context,
            prefix,
            refresh,
        } => {
            let prefix = prefix.clone().unwrap_or_default().into_encoded_bytes();
            // Page by page, printing as it goes (see `ctx list`).
            const PAGE: u32 = 1000;
            let mut after = Bytes::new();
            loop {
                let page = list_page(client, context, &prefix, &after, PAGE, *refresh)?;
                for item in &page {
                    out.kv_item(item)?;
                }
                match page.last() {
                    Some(last) if page.len() == PAGE as usize => after = last.key.clone(),
                    _ => return Ok(()),
                }
            }
        }
    }
}

/// `kv rm`: the entry removed, printed as it was.
fn rm(client: &Client, out: &Output, context: &ContextRef, key: &OsString) -> anyhow::Result<()> {
    // KV_DELETE answers DONE whether or not the key was there: look first, so that a
    // missing key is NOT_FOUND (as for `kv get`) and a removed one is printed as it was.
    let key = Bytes::from(key.clone().into_encoded_bytes());
    let found = list_page(client, context, &key, &[], 1, false)?
        .into_iter()
        .find(|item| item.key == key);
    let Some(item) = found else {
        return Err(NoSuchKey {
            context: context.clone(),
            what: "key",
            key: String::from_utf8_lossy(&key).into_owned(),
        }
        .into());
    };
    client.kv_delete(context.clone(), vec![key])?;
    out.kv_item(&item)
}

/// `kv put`: stores `value` under `key`, then prints the entry the context holds now.
fn put(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    key: &OsString,
    (if_absent, ttl): (bool, Option<Duration>),
    vectors: Option<(&str, &[Vec<f32>])>,
    value: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    let key = Bytes::from(key.clone().into_encoded_bytes());
    let value = Bytes::from(value.unwrap_or_default());
    let entry = KvItem {
        key: key.clone(),
        value_hash: BlobHash::of(&value),
        value_len: value.len() as u32,
        ttl_ms: 0,
        expires_at_unix_ms: 0,
    };
    match (vectors, ttl) {
        (Some((index, vectors)), _) => {
            let dims = vectors.first().map_or(0, Vec::len);
            let dims = u16::try_from(dims).context("a vector has at most 4096 components")?;
            let entry = ctxstore_client::VectorEntry {
                key: key.clone(),
                value,
                vectors: vectors.to_vec(),
            };
            client.kv_put_vectors(context.clone(), index, dims, vec![entry], if_absent, ttl)?;
        }
        // KV_PUT_EX needs version 3: without a TTL, KV_PUT serves older servers.
        (None, Some(_)) => {
            client.kv_put_ex(context.clone(), vec![(key.clone(), value)], if_absent, ttl)?
        }
        (None, None) => client.kv_put(context.clone(), vec![(key.clone(), value)], if_absent)?,
    }
    // What the context holds now: with --if-absent, perhaps the value that was there.
    let stored = list_page(client, context, &key, &[], 1, false)?;
    let stored = stored.into_iter().find(|item| item.key == key);
    out.kv_item(stored.as_ref().unwrap_or(&entry))
}

/// `kv get`: the value (to `output` or stdout), or with `entry` the entry; `refresh` restarts
/// its time to live.
fn get(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    key: &OsString,
    output: Option<&PathBuf>,
    refresh: bool,
    entry: bool,
) -> anyhow::Result<()> {
    let key = key.clone().into_encoded_bytes();
    let missing = || NoSuchKey {
        context: context.clone(),
        what: "key",
        key: String::from_utf8_lossy(&key).into_owned(),
    };
    let (value, item) = if refresh || entry {
        let Some(found) = client.kv_get_ex(context.clone(), key.clone(), refresh)? else {
            return Err(missing().into());
        };
        let item = KvItem {
            key: Bytes::from(key.clone()),
            value_hash: found.value_hash,
            value_len: found.value.len() as u32,
            ttl_ms: found.ttl_ms,
            expires_at_unix_ms: found.expires_at_unix_ms,
        };
        (found.value, Some(item))
    } else {
        let Some((_, value)) = client.kv_get(context.clone(), key.clone())? else {
            return Err(missing().into());
        };
        (value, None)
    };
    match (output, item) {
        (_, Some(item)) if entry => out.kv_item(&item),
        (Some(path), _) => {
            std::fs::write(path, &value).with_context(|| format!("writing {}", path.display()))
        }
        (None, _) => write_stdout(&value),
    }
}

/// One page of entries: with their TTLs (KV_LIST_EX) where the server speaks version 3, else
/// as version 2 has them (no TTL to show); a refresh needs version 3.
fn list_page(
    client: &Client,
    context: &ContextRef,
    prefix: &[u8],
    after: &[u8],
    limit: u32,
    refresh: bool,
) -> anyhow::Result<Vec<KvItem>> {
    Ok(if refresh || client.protocol_version() >= 3 {
        client.kv_list_ex(context.clone(), prefix, after, limit, refresh)?
    } else {
        client.kv_list(context.clone(), prefix, after, limit)?
    })
}

impl Output {
    /// A key-value entry as `kv list` prints it: its TTL and expiry too when it has one (in
    /// JSON `ttl_ms` and `expires_at_unix_ms`, only then: an entry without a TTL prints as
    /// before TTLs existed).
    pub(crate) fn kv_item(&self, item: &KvItem) -> anyhow::Result<()> {
        let key = String::from_utf8_lossy(&item.key);
        if self.json {
            let mut value = json!({
                "key": key,
                "value_hash": item.value_hash.to_hex(),
                "value_len": item.value_len,
            });
            if let (Err(_), Some(object)) = (std::str::from_utf8(&item.key), value.as_object_mut())
            {
                object.insert("key_b64".into(), json!(BASE64_STANDARD.encode(&item.key)));
            }
            if let (true, Some(object)) = (item.ttl_ms > 0, value.as_object_mut()) {
                object.insert("ttl_ms".into(), json!(item.ttl_ms));
                object.insert("expires_at_unix_ms".into(), json!(item.expires_at_unix_ms));
            }
            self.line(&value)
        } else if item.ttl_ms > 0 {
            let expires =
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(item.expires_at_unix_ms);
            self.text(&format!(
                "{} {} bytes {} ttl {} expires {}",
                readable(&key),
                item.value_len,
                item.value_hash,
                humantime::format_duration(std::time::Duration::from_millis(item.ttl_ms)),
                humantime::format_rfc3339_millis(expires)
            ))
        } else {
            self.text(&format!(
                "{} {} bytes {}",
                readable(&key),
                item.value_len,
                item.value_hash
            ))
        }
    }
}
