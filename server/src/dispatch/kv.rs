//! The key-value family (issue 13): a context's keys and values, KV_PUT, KV_GET, KV_DELETE,
//! KV_LIST; and (version 3, issue 34) KV_PUT_EX, KV_GET_EX, KV_LIST_EX and KV_TOUCH: a time to
//! live per entry, refresh on read, each entry's TTL and expiry in the answers.

use bytes::Bytes;
use ctxstore_engine::ContextRef;
use ctxstore_engine::contexts::KvItem;
use ctxstore_protocol::kv;
use ctxstore_protocol::{
    ErrorCode, KvItemExWire, KvItemWire, KvRequest, KvResponse, Response, kv_put_flags,
    kv_read_flags, read_flags,
};
use ctxstore_vocab::limits::{KV_ENTRIES_PER_REQUEST_MAX, KV_TOUCH_KEYS_MAX};

use super::{Scoped, context_ref, engine_error, payload_mode, payload_wire};

/// `detail` of KV_GET's NOT_FOUND when the context exists but the key does not.
const KV_KEY_MISSING: u64 = 1;

impl Scoped<'_> {
    /// Each message's function answers its own struct: the variant that wraps it is the only
    /// one that type-checks (KV_PUT, KV_PUT_EX and KV_DELETE share DONE, which names them).
    pub(super) async fn answer_kv(&self, request: KvRequest) -> Result<KvResponse, Response> {
        let message_type = request.message_type();
        let done = || KvResponse::Done(kv::Done { message_type });
        match request {
            KvRequest::KvPut(put) => {
                let context = context_ref(put.context);
                let put = self.kv_put(context, put.entries, put.if_absent, 0);
                put.await.map(|()| done())
            }
            KvRequest::KvPutEx(put) => {
                let if_absent = put.put_flags & kv_put_flags::IF_ABSENT != 0;
                let context = context_ref(put.context);
                let put = self.kv_put(context, put.entries, if_absent, put.ttl_ms);
                put.await.map(|()| done())
            }
            KvRequest::KvDelete(delete) => self.kv_delete(delete).await.map(|()| done()),
            KvRequest::KvGet(get) => {
                let context = context_ref(get.context);
                let value = self.kv_get(&context, &get.key, get.read_flags);
                value.map(KvResponse::KvValue)
            }
            KvRequest::KvGetEx(get) => {
                let context = context_ref(get.context);
                let value = self.kv_get_ex(&context, &get.key, get.read_flags, get.kv_flags);
                value.await.map(KvResponse::KvValueEx)
            }
            KvRequest::KvGetMany(get) => self.kv_get_many(get).map(KvResponse::KvValues),
            KvRequest::KvList(list) => {
                let context = context_ref(list.context);
                let listed = self.kv_list(&context, &list.prefix, &list.after, list.limit);
                listed.map(KvResponse::KvListed)
            }
            KvRequest::KvListEx(list) => {
                let context = context_ref(list.context);
                let (prefix, after) = (&list.prefix, &list.after);
                let listed = self.kv_list_ex(&context, prefix, after, list.limit, list.kv_flags);
                listed.await.map(KvResponse::KvListedEx)
            }
            KvRequest::KvTouch(touch) => {
                let touched = self.kv_touch(context_ref(touch.context), touch.ttl_ms, touch.keys);
                touched.await.map(KvResponse::KvTouched)
            }
        }
    }

    /// KV_DELETE: the keys gone in one durable record (absent keys are no error).
    async fn kv_delete(&self, delete: kv::KvDelete) -> Result<(), Response> {
        let keys = delete.keys.into_iter().map(|key| key.to_vec()).collect();
        let context = context_ref(delete.context);
        let deleted = self.engine.kv_delete(&context, keys);
        deleted.await.map_err(engine_error)
    }

    /// KV_GET_MANY: the keys' entries from one snapshot (`Engine::kv_get_many`), in order,
    /// with their values, as many as fit the response budget (at least one; the client asks
    /// again for the rest).
    fn kv_get_many(&self, get: kv::KvGetMany) -> Result<kv::KvValues, Response> {
        if get.keys.is_empty() || get.keys.len() > KV_ENTRIES_PER_REQUEST_MAX {
            let code = if get.keys.is_empty() {
                ErrorCode::InvalidArgument
            } else {
                ErrorCode::TooLarge
            };
            let message = format!(
                "KV_GET_MANY names {} keys; it takes 1 to {KV_ENTRIES_PER_REQUEST_MAX}",
                get.keys.len()
            );
            return Err(Response::error(code, message));
        }
        let context = context_ref(get.context);
        let items = self.engine.kv_get_many(&context, &get.keys);
        let items = items.map_err(engine_error)?;
        let budget_bytes = self.limits.response_bytes_max;
        let mut answer_bytes: u64 = 2;
        let mut values = Vec::with_capacity(get.keys.len());
        for (key, item) in get.keys.iter().zip(items) {
            let value = match item {
                None => None,
                Some(item) => Some(self.kv_value(&context, key, Some(item), get.read_flags)?),
            };
            // found u8; hash, TTL, expiry and the payload's 16-byte header and bytes.
            let value_bytes = 1 + value.as_ref().map_or(0, |(_, payload)| {
                32 + 8 + 8 + 16 + payload.data.len() as u64
            });
            if answer_bytes + value_bytes > budget_bytes && !values.is_empty() {
                break;
            }
            answer_bytes += value_bytes;
            values.push(value.map(|(item, payload)| kv::KvValueEx {
                value_hash: item.value_hash,
                ttl_ms: item.ttl_ms,
                expires_at_unix_ms: item.expires_at_unix_ms,
                payload,
            }));
        }
        Ok(kv::KvValues { values })
    }

    /// KV_GET: a value and its hash.
    fn kv_get(
        &self,
        context: &ContextRef,
        key: &Bytes,
        read_flags: u32,
    ) -> Result<kv::KvValue, Response> {
        let item = self.engine.kv_get(context, key).map_err(engine_error)?;
        let (item, payload) = self.kv_value(context, key, item, read_flags)?;
        Ok(kv::KvValue {
            value_hash: item.value_hash,
            payload,
        })
    }

    /// KV_GET_EX: a value with its TTL and expiry, its TTL restarted when asked to refresh.
    async fn kv_get_ex(
        &self,
        context: &ContextRef,
        key: &Bytes,
        read_flags: u32,
        kv_flags: u8,
    ) -> Result<kv::KvValueEx, Response> {
        let item = if kv_flags & kv_read_flags::REFRESH != 0 {
            self.engine.kv_get_refresh(context, key).await
        } else {
            self.engine.kv_get(context, key)
        };
        let item = item.map_err(engine_error)?;
        let (item, payload) = self.kv_value(context, key, item, read_flags)?;
        Ok(kv::KvValueEx {
            value_hash: item.value_hash,
            ttl_ms: item.ttl_ms,
            expires_at_unix_ms: item.expires_at_unix_ms,
            payload,
        })
    }

    /// KV_LIST: a page of keys and their value hashes, after `after` (empty: from the start).
    fn kv_list(
        &self,
        context: &ContextRef,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
    ) -> Result<kv::KvListed, Response> {
        let after = (!after.is_empty()).then_some(after);
        let items = self
            .engine
            .kv_scan(context, prefix, after, limit)
            .map_err(engine_error)?;
        Ok(kv::KvListed {
            items: items.into_iter().map(kv_item_wire).collect(),
        })
    }

    /// KV_LIST_EX: a page of entries with their TTLs, refreshed when asked to.
    async fn kv_list_ex(
        &self,
        context: &ContextRef,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
        kv_flags: u8,
    ) -> Result<kv::KvListedEx, Response> {
        let after = (!after.is_empty()).then_some(after);
        let mut items = self
            .engine
            .kv_scan(context, prefix, after, limit)
            .map_err(engine_error)?;
        if kv_flags & kv_read_flags::REFRESH != 0 {
            items = self.kv_refresh(context, items).await?;
        }
        Ok(kv::KvListedEx {
            items: items.into_iter().map(kv_item_ex_wire).collect(),
        })
    }

    /// KV_TOUCH: restarts (or sets) the TTL of each key; the entries as they are now.
    async fn kv_touch(
        &self,
        context: ContextRef,
        ttl_ms: u64,
        keys: Vec<Bytes>,
    ) -> Result<kv::KvTouched, Response> {
        let keys = keys.into_iter().map(|key| key.to_vec()).collect();
        let ttl_ms = (ttl_ms > 0).then_some(ttl_ms);
        let touch = self.engine.kv_touch(&context, keys, ttl_ms);
        let items = touch.await.map_err(engine_error)?;
        Ok(kv::KvTouched {
            items: items.into_iter().map(kv_item_ex_wire).collect(),
        })
    }

    async fn kv_put(
        &self,
        context: ContextRef,
        entries: Vec<(Bytes, Bytes)>,
        if_absent: bool,
        ttl_ms: u64,
    ) -> Result<(), Response> {
        let entries = entries
            .into_iter()
            .map(|(key, value)| (key.to_vec(), value))
            .collect();
        let put = self.engine.kv_put_ttl(&context, entries, if_absent, ttl_ms);
        put.await.map_err(engine_error)
    }

    /// KV_LIST_EX's refresh: the TTL of each returned entry that has one restarted, in
    /// touches of at most `KV_TOUCH_KEYS_MAX` keys; the page as it is after them (an entry
    /// that expired or went meanwhile drops out).
    async fn kv_refresh(
        &self,
        context: &ContextRef,
        items: Vec<KvItem>,
    ) -> Result<Vec<KvItem>, Response> {
        let expiring: Vec<Vec<u8>> = items
            .iter()
            .filter(|item| item.ttl_ms > 0)
            .map(|item| item.key.to_vec())
            .collect();
        let mut touched = std::collections::HashMap::new();
        for keys in expiring.chunks(KV_TOUCH_KEYS_MAX) {
            let touch = self.engine.kv_touch(context, keys.to_vec(), None);
            for item in touch.await.map_err(engine_error)? {
                touched.insert(item.key.clone(), item);
            }
        }
        Ok(items
            .into_iter()
            .filter_map(|item| match item.ttl_ms {
                0 => Some(item),
                _ => touched.remove(&item.key),
            })
            .collect())
    }

    /// KV_GET and KV_GET_EX: the entry (from the published snapshot) or NOT_FOUND, its value
    /// through the payload cache like any payload.
    fn kv_value(
        &self,
        context: &ContextRef,
        key: &Bytes,
        item: Option<KvItem>,
        flags: u32,
    ) -> Result<(KvItem, ctxstore_protocol::PayloadWire), Response> {
        let Some(item) = item else {
            let key = String::from_utf8_lossy(key);
            let context = match context {
                ContextRef::Id(context_id) => context_id.to_string(),
                ContextRef::Name(name) => format!("@{name}"),
            };
            // detail 1: the context exists, the key does not (0: no such context).
            return Err(Response::Error {
                code: ErrorCode::NotFound,
                detail: KV_KEY_MISSING,
                message: format!("context {context} has no key {key:?}"),
            });
        };
        let mode = payload_mode(flags | read_flags::WITH_PAYLOADS);
        let mut cache = self.cache_for_read();
        let payload = self.engine.read_payload(item.value_hash, mode, &mut *cache);
        let payload = payload.map_err(engine_error)?;
        Ok((item, payload_wire(payload)))
    }
}

fn kv_item_ex_wire(item: KvItem) -> KvItemExWire {
    KvItemExWire {
        key: item.key,
        value_hash: item.value_hash,
        value_len: item.value_len,
        ttl_ms: item.ttl_ms,
        expires_at_unix_ms: item.expires_at_unix_ms,
    }
}

fn kv_item_wire(item: KvItem) -> KvItemWire {
    KvItemWire {
        key: item.key,
        value_hash: item.value_hash,
        value_len: item.value_len,
    }
}
