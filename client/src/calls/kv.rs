//! The key-value family's calls (protocol version 2, issue 13): a context's key-value entries,
//! put and deleted in one group commit, read and listed in key order.

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::{ContextRef, ErrorCode, KvRequest, KvResponse, MessageType, read_flags};

use crate::client::{Client, unexpected};
use crate::error::ClientError;
use crate::types::{BlobHash, KvItem, verify_payload};

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Puts key-value entries into a context in one request and one group commit (KV_PUT):
    /// each value is stored as a blob (equal values once), then every entry at once. With
    /// `if_absent`, keys the context has keep their values (no error). Limits: ≤ 128 entries,
    /// keys 1..=256 bytes, values within the server's `blob_bytes_max` (TOO_LARGE).
    pub async fn kv_put(
        &self,
        context: impl Into<ContextRef>,
        entries: Vec<(Bytes, Bytes)>,
        if_absent: bool,
    ) -> Result<(), ClientError> {
        let request = KvRequest::KvPut {
            context: context.into(),
            if_absent,
            entries,
        };
        self.done(request).await
    }

    /// A key's value and its hash (KV_GET), verified against the hash like every payload
    /// (inflated first when the server sent it compressed). `None` when the context exists
    /// but has no such key; an unknown context stays `ErrorCode::NotFound`. (The server
    /// answers both with NOT_FOUND; on a NOT_FOUND this asks CTX_SHOW which it was: one
    /// more round trip, on a miss only.)
    pub async fn kv_get(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<(BlobHash, Bytes)>, ClientError> {
        let context = context.into();
        let read_flags = if self.shared.config.accept_zstd {
            read_flags::ACCEPT_ZSTD
        } else {
            0
        };
        let request = KvRequest::KvGet {
            context: context.clone(),
            key: key.into(),
            read_flags,
        };
        match self.call(request).await {
            Ok(KvResponse::KvValue {
                value_hash,
                payload,
            }) => {
                let value = verify_payload(&value_hash, None, payload, self.shared.hash_raw)?
                    .ok_or_else(|| {
                        ClientError::Protocol("KV_GET answered without the value's bytes".into())
                    })?;
                Ok(Some((value_hash, value)))
            }
            Ok(other) => Err(unexpected(MessageType::KvGet, other)),
            Err(missing) if missing.code() == Some(ErrorCode::NotFound) => {
                // The context's own NOT_FOUND if it is the context that is missing.
                self.context_info(context).await?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// Deletes key-value entries (KV_DELETE), in one group commit; keys that are not there
    /// are no error. Limits: ≤ 128 keys, each 1..=256 bytes.
    pub async fn kv_delete(
        &self,
        context: impl Into<ContextRef>,
        keys: Vec<Bytes>,
    ) -> Result<(), ClientError> {
        let request = KvRequest::KvDelete {
            context: context.into(),
            keys,
        };
        self.done(request).await
    }

    async fn done(&self, request: KvRequest) -> Result<(), ClientError> {
        let message_type = request.message_type();
        match self.call(request).await? {
            KvResponse::Done { message_type: done } if done == message_type => Ok(()),
            other => Err(unexpected(message_type, other)),
        }
    }

    /// One page of a context's key-value entries whose keys start with `prefix`, in key
    /// order, after the key `after` (empty: from the first), at most `limit` (≤ 1000)
    /// (KV_LIST). The next page starts after the last key of a full page; a page shorter than
    /// `limit` is the last.
    pub async fn kv_list(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
    ) -> Result<Vec<KvItem>, ClientError> {
        let request = KvRequest::KvList {
            context: context.into(),
            prefix: Bytes::copy_from_slice(prefix),
            after: Bytes::copy_from_slice(after),
            limit,
        };
        match self.call(request).await? {
            KvResponse::KvList { items } => {
                let items: Vec<KvItem> = items.into_iter().map(KvItem::from_wire).collect();
                // Pages are cut by key: keys out of order or outside the prefix would make
                // the next page skip or repeat entries.
                let in_order = items.windows(2).all(|pair| pair[0].key < pair[1].key);
                let after_cursor = items.first().is_none_or(|first| &first.key[..] > after);
                let prefixed = items.iter().all(|item| item.key.starts_with(prefix));
                if items.len() > limit as usize || !in_order || !after_cursor || !prefixed {
                    return Err(ClientError::Protocol(format!(
                        "KV_LIST answered {} entries not in key order after the cursor, within \
                         the prefix and the limit of {limit}",
                        items.len()
                    )));
                }
                Ok(items)
            }
            other => Err(unexpected(MessageType::KvList, other)),
        }
    }

    /// Every key-value entry of a context whose key starts with `prefix`, in key order,
    /// following `kv_list` page by page (1000 each). Not a snapshot: a key added meanwhile
    /// after the page being read is seen, one before it is not.
    pub async fn kv_list_all(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
    ) -> Result<Vec<KvItem>, ClientError> {
        const PAGE: u32 = 1000;
        let context = context.into();
        let mut items: Vec<KvItem> = Vec::new();
        loop {
            let after = items
                .last()
                .map(|item| item.key.clone())
                .unwrap_or_default();
            let page = self.kv_list(context.clone(), prefix, &after, PAGE).await?;
            let full = page.len() == PAGE as usize;
            items.extend(page);
            if !full {
                return Ok(items);
            }
        }
    }
}
