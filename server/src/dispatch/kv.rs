//! A context's keys and values (issue 13): KV_PUT, KV_GET, KV_DELETE, KV_LIST.

use bytes::Bytes;
use ctxstore_engine::ContextRef;
use ctxstore_engine::contexts::KvItem;
use ctxstore_protocol::{ErrorCode, KvItemWire, Request, Response, read_flags};

use super::{Dispatcher, context_ref, engine_error, misrouted, payload_mode, payload_wire};

/// `detail` of KV_GET's NOT_FOUND when the context exists but the key does not.
const KV_KEY_MISSING: u64 = 1;

impl Dispatcher {
    pub(super) async fn answer_kv(&self, request: Request) -> Result<Response, Response> {
        let message_type = request.message_type();
        match request {
            Request::KvPut {
                context,
                if_absent,
                entries,
            } => {
                let entries = entries
                    .into_iter()
                    .map(|(key, value)| (key.to_vec(), value))
                    .collect();
                let context = context_ref(context);
                let put = self.engine.kv_put(&context, entries, if_absent);
                put.await.map_err(engine_error)?;
                Ok(Response::Done { message_type })
            }
            Request::KvGet {
                context,
                key,
                read_flags,
            } => self.kv_get(context_ref(context), &key, read_flags),
            Request::KvDelete { context, keys } => {
                let keys = keys.into_iter().map(|key| key.to_vec()).collect();
                let context = context_ref(context);
                let delete = self.engine.kv_delete(&context, keys);
                delete.await.map_err(engine_error)?;
                Ok(Response::Done { message_type })
            }
            Request::KvList {
                context,
                prefix,
                after,
                limit,
            } => {
                let after = (!after.is_empty()).then_some(&after[..]);
                let items = self
                    .engine
                    .kv_scan(&context_ref(context), &prefix, after, limit)
                    .map_err(engine_error)?;
                Ok(Response::KvList {
                    items: items.into_iter().map(kv_item_wire).collect(),
                })
            }
            other => Err(misrouted(&other)),
        }
    }

    /// KV_GET: the entry from the published snapshot, its value through the payload cache
    /// like any payload.
    fn kv_get(&self, context: ContextRef, key: &Bytes, flags: u32) -> Result<Response, Response> {
        let item = self.engine.kv_get(&context, key).map_err(engine_error)?;
        let Some(item) = item else {
            let key = String::from_utf8_lossy(key);
            let context = match &context {
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
        Ok(Response::KvValue {
            value_hash: item.value_hash,
            payload: payload_wire(payload),
        })
    }
}

fn kv_item_wire(item: KvItem) -> KvItemWire {
    KvItemWire {
        key: item.key,
        value_hash: item.value_hash,
        value_len: item.value_len,
    }
}
