//! The key-value family's calls (protocol version 2, issue 13): a context's key-value entries,
//! put and deleted in one group commit, read and listed in key order; and (version 3, issue
//! 34) the same with a time to live per entry, refresh on read, and touches. `kv_put` and
//! `kv_put_ex` carry their handle's durability (`Client::with_durability`, decision 0031).

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::kv;
use ctxstore_protocol::{
    Ask, ContextRef, ErrorCode, MessageType, kv_put_flags, kv_read_flags, read_flags,
};
use ctxstore_vocab::limits::KV_ENTRIES_PER_REQUEST_MAX;

use crate::client::{Client, check_pair};
use crate::error::ClientError;
use crate::types::{BlobHash, KvItem, KvValue, verify_payload};

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
        let request = kv::KvPut {
            context: context.into(),
            if_absent,
            entries,
        };
        self.done(request).await
    }

    /// `kv_put` with a time to live (KV_PUT_EX, protocol version 3): every entry written
    /// expires `ttl` after this put or its last refresh (`None`: never). From then on no read
    /// sees it and the server removes it. A TTL is 1 ms to 100 years, whole milliseconds
    /// (INVALID_ARGUMENT past that; a sub-millisecond TTL is refused here).
    pub async fn kv_put_ex(
        &self,
        context: impl Into<ContextRef>,
        entries: Vec<(Bytes, Bytes)>,
        if_absent: bool,
        ttl: Option<Duration>,
    ) -> Result<(), ClientError> {
        let request = kv::KvPutEx {
            context: context.into(),
            put_flags: if if_absent {
                kv_put_flags::IF_ABSENT
            } else {
                0
            },
            ttl_ms: ttl_ms(ttl)?,
            entries,
        };
        self.done(request).await
    }

    /// A key's value with its TTL and expiry (KV_GET_EX, protocol version 3); with `refresh`,
    /// the entry's TTL restarts from now first (a durable write when it has one). `None` when
    /// the context exists but has no such key, or it expired; an unknown context stays
    /// `ErrorCode::NotFound` (asked like `kv_get` does).
    pub async fn kv_get_ex(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
        refresh: bool,
    ) -> Result<Option<KvValue>, ClientError> {
        let context = context.into();
        let request = kv::KvGetEx {
            context: context.clone(),
            key: key.into(),
            read_flags: self.kv_read_flags(),
            kv_flags: if refresh { kv_read_flags::REFRESH } else { 0 },
        };
        match self.ask(request).await {
            Ok(answer) => Ok(Some(self.kv_value_ex(answer, "KV_GET_EX")?)),
            Err(missing) if missing.code() == Some(ErrorCode::NotFound) => {
                self.context_info(context).await?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// The values of several keys, with their TTLs and expiries, in `keys`' order (KV_GET_MANY,
    /// protocol version 3): `None` for a key the context has not (or that expired). Each
    /// request reads its keys from one snapshot; more than one request is sent when `keys`
    /// pass `KV_ENTRIES_PER_REQUEST_MAX` (128) or their values the server's response budget,
    /// and then a put between them may show for the later keys only. An unknown context is
    /// `ErrorCode::NotFound`; no keys is an empty answer without a request.
    pub async fn kv_get_many(
        &self,
        context: impl Into<ContextRef>,
        keys: &[Bytes],
    ) -> Result<Vec<Option<KvValue>>, ClientError> {
        let context = context.into();
        let mut values = Vec::with_capacity(keys.len());
        while values.len() < keys.len() {
            let rest = &keys[values.len()..];
            let asked = &rest[..rest.len().min(KV_ENTRIES_PER_REQUEST_MAX)];
            let request = kv::KvGetMany {
                context: context.clone(),
                read_flags: self.kv_read_flags(),
                keys: asked.to_vec(),
            };
            let answer = self.ask(request).await?;
            // At least one value, at most one per key asked: else the loop would not end.
            let answered = answer.values.len();
            check_pair(
                MessageType::KvGetMany,
                (1..=asked.len()).contains(&answered),
            )?;
            for value in answer.values {
                values.push(match value {
                    None => None,
                    Some(value) => Some(self.kv_value_ex(value, "KV_GET_MANY")?),
                });
            }
        }
        Ok(values)
    }

    /// A KV_VALUE_EX's value, checked against its hash (inflated first when compressed).
    fn kv_value_ex(&self, answer: kv::KvValueEx, message: &str) -> Result<KvValue, ClientError> {
        let hash = answer.value_hash;
        let value = verify_payload(&hash, None, answer.payload, self.verifies_raw_payloads())?
            .ok_or_else(|| {
                ClientError::Protocol(format!("{message} answered without the value's bytes"))
            })?;
        Ok(KvValue {
            value_hash: hash,
            value,
            ttl_ms: answer.ttl_ms,
            expires_at_unix_ms: answer.expires_at_unix_ms,
        })
    }

    /// `kv_list` with each entry's TTL and expiry (KV_LIST_EX, protocol version 3); with
    /// `refresh`, the TTL of every entry returned restarts from now first.
    pub async fn kv_list_ex(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
        refresh: bool,
    ) -> Result<Vec<KvItem>, ClientError> {
        let request = kv::KvListEx {
            context: context.into(),
            prefix: Bytes::copy_from_slice(prefix),
            after: Bytes::copy_from_slice(after),
            limit,
            kv_flags: if refresh { kv_read_flags::REFRESH } else { 0 },
        };
        let kv::KvListedEx { items } = self.ask(request).await?;
        let items = items.into_iter().map(KvItem::from_wire_ex).collect();
        check_page("KV_LIST_EX", items, prefix, after, limit)
    }

    /// Restarts the TTL of each key from now (KV_TOUCH, protocol version 3), in one durable
    /// record: with `ttl`, that TTL from now on (also for entries without one), else each
    /// entry's own (entries without one are left as they are). Absent and expired keys are no
    /// error. Returns the live entries among `keys`, as they are now. Limits: 1..=128 keys.
    pub async fn kv_touch(
        &self,
        context: impl Into<ContextRef>,
        keys: Vec<Bytes>,
        ttl: Option<Duration>,
    ) -> Result<Vec<KvItem>, ClientError> {
        let request = kv::KvTouch {
            context: context.into(),
            ttl_ms: ttl_ms(ttl)?,
            keys,
        };
        let kv::KvTouched { items } = self.ask(request).await?;
        Ok(items.into_iter().map(KvItem::from_wire_ex).collect())
    }

    fn kv_read_flags(&self) -> u32 {
        if self.shared.config.accept_zstd {
            read_flags::ACCEPT_ZSTD
        } else {
            0
        }
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
        let request = kv::KvGet {
            context: context.clone(),
            key: key.into(),
            read_flags: self.kv_read_flags(),
        };
        match self.ask(request).await {
            Ok(kv::KvValue {
                value_hash,
                payload,
            }) => {
                let value =
                    verify_payload(&value_hash, None, payload, self.verifies_raw_payloads())?
                        .ok_or_else(|| {
                            ClientError::Protocol(
                                "KV_GET answered without the value's bytes".into(),
                            )
                        })?;
                Ok(Some((value_hash, value)))
            }
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
        let request = kv::KvDelete {
            context: context.into(),
            keys,
        };
        self.done(request).await
    }

    /// KV_PUT's, KV_PUT_EX's and KV_DELETE's answer: `ask` checked it is this message's.
    async fn done<Q: Ask<Answer = kv::Done>>(&self, request: Q) -> Result<(), ClientError> {
        self.ask(request).await?;
        Ok(())
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
        let request = kv::KvList {
            context: context.into(),
            prefix: Bytes::copy_from_slice(prefix),
            after: Bytes::copy_from_slice(after),
            limit,
        };
        let kv::KvListed { items } = self.ask(request).await?;
        let items = items.into_iter().map(KvItem::from_wire).collect();
        check_page("KV_LIST", items, prefix, after, limit)
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

/// A listing page as the protocol promises it. Pages are cut by key: keys out of order or
/// outside the prefix would make the next page skip or repeat entries.
fn check_page(
    message: &str,
    items: Vec<KvItem>,
    prefix: &[u8],
    after: &[u8],
    limit: u32,
) -> Result<Vec<KvItem>, ClientError> {
    let in_order = items.windows(2).all(|pair| pair[0].key < pair[1].key);
    let after_cursor = items.first().is_none_or(|first| &first.key[..] > after);
    let prefixed = items.iter().all(|item| item.key.starts_with(prefix));
    if items.len() > limit as usize || !in_order || !after_cursor || !prefixed {
        return Err(ClientError::Protocol(format!(
            "{message} answered {} entries not in key order after the cursor, within the \
             prefix and the limit of {limit}",
            items.len()
        )));
    }
    Ok(items)
}

/// A TTL as the wire carries it: whole milliseconds, 0 for none. A TTL that is not a whole
/// positive number of milliseconds would be silently changed: refused instead.
pub(super) fn ttl_ms(ttl: Option<Duration>) -> Result<u64, ClientError> {
    let Some(ttl) = ttl else {
        return Ok(0);
    };
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ttl_ms == 0 || Duration::from_millis(ttl_ms) != ttl {
        return Err(ClientError::InvalidArgument(format!(
            "a key-value TTL is a whole number of milliseconds, at least 1 ms; got {ttl:?}"
        )));
    }
    Ok(ttl_ms)
}
