//! `kv put/get/rm/list`: a context's key-value entries.

use anyhow::Context;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{BlobHash, KvItem};
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
            ..
        } => {
            let key = Bytes::from(key.clone().into_encoded_bytes());
            let value = Bytes::from(value.unwrap_or_default());
            let entry = KvItem {
                key: key.clone(),
                value_hash: BlobHash::of(&value),
                value_len: value.len() as u32,
            };
            client.kv_put(context.clone(), vec![(key.clone(), value)], *if_absent)?;
            // What the context holds now: with --if-absent, perhaps the value that was there.
            let stored = client.kv_list(context.clone(), &key, &[], 1)?;
            let stored = stored.into_iter().find(|item| item.key == key);
            out.kv_item(stored.as_ref().unwrap_or(&entry))
        }
        KvCommand::Get {
            context,
            key,
            output,
        } => {
            let key = key.clone().into_encoded_bytes();
            let Some((_, value)) = client.kv_get(context.clone(), key.clone())? else {
                return Err(NoSuchKey {
                    context: context.clone(),
                    what: "key",
                    key: String::from_utf8_lossy(&key).into_owned(),
                }
                .into());
            };
            match output {
                Some(path) => std::fs::write(path, &value)
                    .with_context(|| format!("writing {}", path.display())),
                None => write_stdout(&value),
            }
        }
        KvCommand::Rm { context, key } => {
            // KV_DELETE answers DONE whether or not the key was there: look first, so that a
            // missing key is NOT_FOUND (as for `kv get`) and a removed one is printed as it was.
            let key = Bytes::from(key.clone().into_encoded_bytes());
            let found = client
                .kv_list(context.clone(), &key, &Bytes::new(), 1)?
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
        KvCommand::List { context, prefix } => {
            let prefix = prefix.clone().unwrap_or_default().into_encoded_bytes();
            // Page by page, printing as it goes (see `ctx list`).
            const PAGE: u32 = 1000;
            let mut after = Bytes::new();
            loop {
                let page = client.kv_list(context.clone(), &prefix, &after, PAGE)?;
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

impl Output {
    /// A key-value entry as `kv list` prints it.
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
            self.line(&value)
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
