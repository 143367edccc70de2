//! Contexts as agent threads, the caller's side: names resolved, metadata changes sent to the
//! sequencer (key-value values first made durable as blobs, like an append's payload), and
//! reads — views, listings, key-value look-ups — answered from the published snapshot
//! (`sequencer::view::ContextsView`) without asking any actor.

use std::sync::Arc;

use bytes::Bytes;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::format::context_meta::{
    CONTEXT_NAME_BYTES_MAX, ContextMeta, KV_ENTRIES_PER_REQUEST_MAX, KV_KEY_BYTES_MAX,
    KV_TOUCH_KEYS_MAX, KvEntry, KvExpiry, TTL_MS_MAX,
};
use crate::ids::{BlobHash, ContextId, TurnId};
use crate::model::{ContextRef, ContextView, Created, NewContext, Scope};
use crate::pipeline::SequencerRequest;
use crate::seal::Addressing;
use crate::sequencer::contexts::{ContextInfo, Contexts, KvValue};
use crate::store_dir::now_unix_ms;

/// Contexts one listing page may return.
pub const LIST_PAGE_MAX: u32 = 1000;
/// Key-value entries one scan page may return.
pub const KV_SCAN_PAGE_MAX: u32 = 1000;

/// Which contexts a listing returns: all of the given conditions hold.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ListQuery {
    /// Tag equalities (answered from the tag index: a selective tag scans only its contexts).
    pub tags: Vec<(String, String)>,
    /// Names starting with this (answered from the sorted names; pages go in name order).
    pub name_prefix: Option<String>,
    pub updated_after_unix_ms: Option<u64>,
    pub updated_before_unix_ms: Option<u64>,
    /// Where the previous page ended.
    pub cursor: Option<ListCursor>,
    /// At most `LIST_PAGE_MAX`.
    pub limit: u32,
}

/// Where a listing page ended: the last context returned (by name with a name prefix, else by
/// ContextID).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ListCursor {
    Id(ContextId),
    Name(String),
}

impl ListCursor {
    /// The cursor of a page of `query` that ends at `last`: by name when the query has a name
    /// prefix (pages go in name order), else by ContextID. For callers that cut a page
    /// shorter (a response byte budget) and continue from where they cut.
    pub fn after(last: &ContextView, query: &ListQuery) -> ListCursor {
        match &query.name_prefix {
            Some(_) => ListCursor::Name(last.name.clone().unwrap_or_default()),
            None => ListCursor::Id(last.head.context_id),
        }
    }
}

/// A page of a listing.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ContextPage {
    pub contexts: Vec<ContextView>,
    /// `None` when there are no more.
    pub next_cursor: Option<ListCursor>,
}

/// A key-value entry as reads return it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KvItem {
    pub key: Bytes,
    pub value_hash: BlobHash,
    pub value_len: u32,
    /// Milliseconds it lives after its put or last refresh (0: for ever).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0: never).
    pub expires_at_unix_ms: u64,
}

impl KvItem {
    /// An entry as a handle with `addressing` returns it: its value's hash, not its address.
    fn of(key: Bytes, value: &KvValue, addressing: &Addressing) -> KvItem {
        KvItem {
            key,
            value_hash: addressing.hash_of(value.hash),
            value_len: value.len,
            ttl_ms: value.ttl_ms,
            expires_at_unix_ms: value.expires_at_unix_ms,
        }
    }
}

impl Engine {
    /// The ContextID a reference names in this handle's scope: NOT_FOUND for an unknown id
    /// or name, and for another tenant's, with the same error (decision 0032 §2).
    pub fn resolve(&self, context: &ContextRef) -> Result<ContextId, EngineError> {
        match context {
            ContextRef::Id(context_id) => {
                let published = &self.inner.published;
                let exists = published.heads.head(*context_id).is_some();
                let visible = || published.sees(self.scope, *context_id);
                (exists && visible())
                    .then_some(*context_id)
                    .ok_or(EngineError::ContextNotFound(*context_id))
            }
            // A name no context can have is a caller's mistake to be told, not NOT_FOUND.
            ContextRef::Name(name) if name.len() > CONTEXT_NAME_BYTES_MAX => {
                Err(EngineError::Limit {
                    what: "bytes of a context name",
                    limit: CONTEXT_NAME_BYTES_MAX,
                })
            }
            ContextRef::Name(name) => self
                .inner
                .published
                .contexts
                .load()
                .by_name(self.scope.tenant_id(), name)
                .ok_or_else(|| EngineError::NameNotFound(name.clone())),
        }
    }

    /// A context's head, name, tags and times.
    pub fn context(&self, context: &ContextRef) -> Result<ContextView, EngineError> {
        let snapshot = self.inner.published.contexts.load();
        let context_id = self.resolve(context)?;
        self.view(&snapshot, context_id)
    }

    /// A copy of `source` named `name`: its head, tags and key-value entries, sharing every
    /// turn and blob. O(its metadata).
    pub async fn clone_context(
        &self,
        source: ContextRef,
        name: String,
    ) -> Result<ContextView, EngineError> {
        let new = NewContext {
            clone_from: Some(source),
            name: Some(name),
            ..NewContext::default()
        };
        self.create(new)
            .await
            .map(|created: Created| created.context)
    }

    /// Names a context that has no name yet.
    pub async fn set_name(
        &self,
        context: &ContextRef,
        name: String,
    ) -> Result<ContextView, EngineError> {
        let context_id = self.resolve(context)?;
        let changes = vec![ContextMeta::Name(name)];
        self.change_meta(context_id, changes, None, false).await
    }

    /// Sets and removes tags atomically; with `expected_head`, only if the head is still that
    /// turn (so a status change and the head agree).
    pub async fn update_tags(
        &self,
        context: &ContextRef,
        set: Vec<(String, String)>,
        remove: Vec<String>,
        expected_head: Option<TurnId>,
    ) -> Result<ContextView, EngineError> {
        let context_id = self.resolve(context)?;
        let changes: Vec<_> = set
            .into_iter()
            .map(|(key, value)| (key, Some(value)))
            .chain(remove.into_iter().map(|key| (key, None)))
            .collect();
        let changes = vec![ContextMeta::Tags(changes)];
        self.change_meta(context_id, changes, expected_head, false)
            .await
    }

    /// Puts key-value entries in one group commit; values are stored as blobs (equal values
    /// are stored once). With `if_absent`, keys the context has keep their values.
    pub async fn kv_put(
        &self,
        context: &ContextRef,
        entries: Vec<(Vec<u8>, Bytes)>,
        if_absent: bool,
    ) -> Result<(), EngineError> {
        self.kv_put_ttl(context, entries, if_absent, 0).await
    }

    /// `kv_put` of entries that each expire `ttl_ms` after this put or their last refresh
    /// (0: never): from that instant no read sees them, and the reaper removes them.
    pub async fn kv_put_ttl(
        &self,
        context: &ContextRef,
        entries: Vec<(Vec<u8>, Bytes)>,
        if_absent: bool,
        ttl_ms: u64,
    ) -> Result<(), EngineError> {
        let context_id = self.resolve(context)?;
        check_kv_count(entries.len())?;
        check_kv_ttl(ttl_ms)?;
        let mut stored = Vec::with_capacity(entries.len());
        let mut values = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            check_kv_key(&key)?;
            let hash = BlobHash::of(&value);
            stored.push(KvEntry {
                key,
                // The record names the value by its address in this handle's tenant.
                value_hash: self.address(hash),
                value_len: value.len() as u32,
                ttl_ms,
                // The sequencer sets the instant from its clock when it writes the record.
                expires_at_unix_ms: 0,
                vectors: None,
            });
            values.push((hash, value));
        }
        self.put_kv_entries(context_id, stored, values, if_absent)
            .await
    }

    /// Stores `values` (the blobs `stored` names: values, and vectors) and then the one
    /// record of `stored`.
    pub(crate) async fn put_kv_entries(
        &self,
        context_id: ContextId,
        stored: Vec<KvEntry>,
        values: Vec<(BlobHash, Bytes)>,
        if_absent: bool,
    ) -> Result<(), EngineError> {
        // Every blob is durable before the record that names it, in one shard group commit.
        // A blob a garbage collection swept in between is stored again (`SWEPT_RETRIES_MAX`).
        let mut attempts = 0;
        loop {
            self.store_blobs(values.clone()).await?;
            let changes = vec![ContextMeta::KvPut(stored.clone())];
            match self.change_meta(context_id, changes, None, if_absent).await {
                Err(EngineError::BlobNotFound(gone))
                    if attempts < crate::engine::append::SWEPT_RETRIES_MAX
                        && values.iter().any(|(hash, _)| self.address(*hash) == gone) =>
                {
                    attempts += 1;
                }
                result => return result.map(drop).map_err(|error| self.shown_error(error)),
            }
        }
    }

    /// Deletes key-value entries (absent keys are no error).
    pub async fn kv_delete(
        &self,
        context: &ContextRef,
        keys: Vec<Vec<u8>>,
    ) -> Result<(), EngineError> {
        let context_id = self.resolve(context)?;
        check_kv_count(keys.len())?;
        for key in &keys {
            check_kv_key(key)?;
        }
        let changes = vec![ContextMeta::KvDelete(keys)];
        self.change_meta(context_id, changes, None, false)
            .await
            .map(drop)
    }

    /// A key-value entry, without its value (read that with `blob`). An expired entry is
    /// absent from its expiry on, whether or not the reaper removed it yet.
    pub fn kv_get(&self, context: &ContextRef, key: &[u8]) -> Result<Option<KvItem>, EngineError> {
        check_kv_key(key)?;
        let snapshot = self.inner.published.contexts.load();
        let info = self.info(&snapshot, context)?;
        let now = now_unix_ms();
        Ok(info
            .kv
            .get(key)
            .filter(|value| value.live_at(now))
            .map(|value| KvItem::of(Bytes::copy_from_slice(key), value, &self.addressing)))
    }

    /// The entries of several keys (`kv_get` each) from one snapshot: a put of several keys
    /// is seen whole or not at all. `None` for a key the context has not (or that expired).
    pub fn kv_get_many(
        &self,
        context: &ContextRef,
        keys: &[Bytes],
    ) -> Result<Vec<Option<KvItem>>, EngineError> {
        keys.iter().try_for_each(|key| check_kv_key(key))?;
        let snapshot = self.inner.published.contexts.load();
        let info = self.info(&snapshot, context)?;
        let now = now_unix_ms();
        let item = |key: &Bytes| {
            let value = info.kv.get(key.as_ref()).filter(|value| value.live_at(now));
            value.map(|value| KvItem::of(key.clone(), value, &self.addressing))
        };
        Ok(keys.iter().map(item).collect())
    }

    /// `kv_get` that also restarts the entry's TTL from now (a refresh on read): one durable
    /// record when the entry has a TTL, none when it has not.
    pub async fn kv_get_refresh(
        &self,
        context: &ContextRef,
        key: &[u8],
    ) -> Result<Option<KvItem>, EngineError> {
        match self.kv_get(context, key)? {
            Some(item) if item.ttl_ms > 0 => {
                let touched = self.kv_touch(context, vec![key.to_vec()], None).await?;
                Ok(touched.into_iter().next())
            }
            other => Ok(other),
        }
    }

    /// Restarts the TTL of each live entry of `keys` from now: with `ttl_ms`, that TTL from
    /// now on, else the entry's own (entries without one are left as they are). One durable
    /// record. Returns the touched entries as they are now (absent and expired keys left out).
    pub async fn kv_touch(
        &self,
        context: &ContextRef,
        keys: Vec<Vec<u8>>,
        ttl_ms: Option<u64>,
    ) -> Result<Vec<KvItem>, EngineError> {
        let context_id = self.resolve(context)?;
        if keys.is_empty() || keys.len() > KV_TOUCH_KEYS_MAX {
            return Err(EngineError::Limit {
                what: "keys one key-value touch refreshes (1..=128)",
                limit: KV_TOUCH_KEYS_MAX,
            });
        }
        for key in &keys {
            check_kv_key(key)?;
        }
        if ttl_ms == Some(0) {
            return Err(EngineError::InvalidArgument(
                "a touch's TTL is 1 ms to 100 years; to keep the entries' own, give none".into(),
            ));
        }
        check_kv_ttl(ttl_ms.unwrap_or(0))?;
        let touch: Vec<KvExpiry> = keys
            .iter()
            .map(|key| KvExpiry {
                key: key.clone(),
                // 0: the entry's own; the sequencer sets the instant (`resolve_expiries`).
                ttl_ms: ttl_ms.unwrap_or(0),
                expires_at_unix_ms: 0,
            })
            .collect();
        self.change_meta(context_id, vec![ContextMeta::KvTouch(touch)], None, false)
            .await?;
        // The sequencer answers after publishing: this snapshot holds the touch.
        let snapshot = self.inner.published.contexts.load();
        let info = snapshot.get(context_id).cloned().unwrap_or_default();
        let now = now_unix_ms();
        Ok(keys
            .into_iter()
            .filter_map(|key| {
                let value = info.kv.get(key.as_slice())?;
                value
                    .live_at(now)
                    .then(|| KvItem::of(Bytes::from(key), value, &self.addressing))
            })
            .collect())
    }

    /// Key-value entries whose keys start with `prefix`, in key order, after `after`.
    pub fn kv_scan(
        &self,
        context: &ContextRef,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: u32,
    ) -> Result<Vec<KvItem>, EngineError> {
        if limit == 0 || limit > KV_SCAN_PAGE_MAX {
            return Err(EngineError::Limit {
                what: "key-value entries per scan page (1..=1000)",
                limit: KV_SCAN_PAGE_MAX as usize,
            });
        }
        // A prefix or cursor no key can have is a caller's mistake to be told.
        let longest = prefix.len().max(after.map_or(0, <[u8]>::len));
        if longest > KV_KEY_BYTES_MAX {
            return Err(EngineError::Limit {
                what: "bytes of a key-value prefix or cursor (0..=256)",
                limit: KV_KEY_BYTES_MAX,
            });
        }
        let snapshot = self.inner.published.contexts.load();
        let info = self.info(&snapshot, context)?;
        // From the prefix, or from the cursor when it lies past the prefix's start.
        let start = Bytes::copy_from_slice(after.filter(|after| *after > prefix).unwrap_or(prefix));
        let now = now_unix_ms();
        Ok(info
            .kv
            .range(start..)
            .filter(|(key, _)| Some(key.as_ref()) != after)
            .take_while(|(key, _)| key.starts_with(prefix))
            // Expired entries are neither returned nor counted.
            .filter(|(_, value)| value.live_at(now))
            .take(limit as usize)
            .map(|(key, value)| KvItem::of(key.clone(), value, &self.addressing))
            .collect())
    }

    /// Contexts matching every condition of `query`, one page.
    pub fn list_contexts(&self, query: &ListQuery) -> Result<ContextPage, EngineError> {
        if query.limit == 0 || query.limit > LIST_PAGE_MAX {
            return Err(EngineError::Limit {
                what: "contexts per listing page (1..=1000)",
                limit: LIST_PAGE_MAX as usize,
            });
        }
        let snapshot = self.inner.published.contexts.load();
        let limit = query.limit as usize;
        // Another tenant's contexts are left out before the limit and the cursor, so a page
        // says nothing of them.
        let matches = |context_id: ContextId| {
            snapshot.get(context_id).is_some_and(|info| {
                !info.deleted && self.scope.sees(info.tenant_id) && matches_query(info, query)
            })
        };
        let ids: Vec<ContextId> = if let Some(prefix) = &query.name_prefix {
            let after = match &query.cursor {
                Some(ListCursor::Name(name)) => Some(name.as_str()),
                _ => None,
            };
            snapshot
                .names_from(self.scope.tenant_id(), prefix, after)
                .map(|(_, context_id)| context_id)
                .filter(|&context_id| matches(context_id))
                .take(limit + 1)
                .collect()
        } else {
            let after = match query.cursor {
                Some(ListCursor::Id(context_id)) => context_id.0,
                _ => 0,
            };
            // A tenant's listing walks the smallest of its own live contexts and the sets of
            // the tags asked for (a tag no context has: nothing); the store-wide scope, every
            // ContextID when no tag narrows it.
            let none = imbl::OrdSet::new();
            let tenant_set = match self.scope {
                Scope::Tenant(tenant_id) => {
                    Some(snapshot.live_contexts_of(tenant_id).unwrap_or(&none))
                }
                Scope::Store => None,
            };
            let tag_set = smallest_tag_set(&snapshot, &query.tags);
            let smallest = if !query.tags.is_empty() && tag_set.is_none() {
                Some(&none)
            } else {
                [tenant_set, tag_set]
                    .into_iter()
                    .flatten()
                    .min_by_key(|set| set.len())
            };
            let candidates: Box<dyn Iterator<Item = ContextId>> = match smallest {
                Some(set) => Box::new(set.range(ContextId(after + 1)..).copied()),
                None => Box::new((after + 1..=snapshot.count()).map(ContextId)),
            };
            candidates
                .filter(|&context_id| matches(context_id))
                .take(limit + 1)
                .collect()
        };
        let more = ids.len() > limit;
        let contexts = ids
            .into_iter()
            .take(limit)
            .map(|context_id| self.view(&snapshot, context_id))
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match contexts.last() {
            Some(last) if more => Some(ListCursor::after(last, query)),
            _ => None,
        };
        Ok(ContextPage {
            contexts,
            next_cursor,
        })
    }

    pub(crate) async fn change_meta(
        &self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        expected_head: Option<TurnId>,
        kv_if_absent: bool,
    ) -> Result<ContextView, EngineError> {
        self.check_open()?;
        self.inner.published.status.check_writable()?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Meta {
            context_id,
            changes,
            expected_head,
            kv_if_absent,
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    fn info(
        &self,
        snapshot: &Arc<Contexts>,
        context: &ContextRef,
    ) -> Result<ContextInfo, EngineError> {
        let context_id = self.resolve(context)?;
        Ok(snapshot.get(context_id).cloned().unwrap_or_default())
    }

    fn view(&self, snapshot: &Contexts, context_id: ContextId) -> Result<ContextView, EngineError> {
        let head = self.reader().head(context_id)?;
        // A context created after this snapshot was taken has no metadata in it yet.
        Ok(match snapshot.get(context_id) {
            Some(info) => info.view(head),
            None => ContextInfo::default().view(head),
        })
    }
}

/// The most selective tag of a query: the index set with the fewest contexts. `None` when the
/// query has no tags, or a tag no context carries (then nothing matches).
fn smallest_tag_set<'a>(
    snapshot: &'a Contexts,
    tags: &[(String, String)],
) -> Option<&'a imbl::OrdSet<ContextId>> {
    let mut smallest: Option<&imbl::OrdSet<ContextId>> = None;
    for (key, value) in tags {
        let set = snapshot.tagged(key, value)?;
        if smallest.is_none_or(|current| set.len() < current.len()) {
            smallest = Some(set);
        }
    }
    smallest
}

fn matches_query(info: &ContextInfo, query: &ListQuery) -> bool {
    let tags_match = query
        .tags
        .iter()
        .all(|(key, value)| info.tags.get(key.as_str()).map(|v| v.as_ref()) == Some(value));
    let name_match = match &query.name_prefix {
        Some(prefix) => info
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(prefix.as_str())),
        None => true,
    };
    tags_match
        && name_match
        && query
            .updated_after_unix_ms
            .is_none_or(|after| info.updated_at_unix_ms > after)
        && query
            .updated_before_unix_ms
            .is_none_or(|before| info.updated_at_unix_ms < before)
}

pub(crate) fn check_kv_count(count: usize) -> Result<(), EngineError> {
    if count == 0 || count > KV_ENTRIES_PER_REQUEST_MAX {
        return Err(EngineError::Limit {
            what: "key-value entries per request (1..=128)",
            limit: KV_ENTRIES_PER_REQUEST_MAX,
        });
    }
    Ok(())
}

pub(crate) fn check_kv_ttl(ttl_ms: u64) -> Result<(), EngineError> {
    if ttl_ms > TTL_MS_MAX {
        return Err(EngineError::InvalidArgument(format!(
            "a key-value TTL is at most 100 years ({TTL_MS_MAX} ms); asked {ttl_ms} ms"
        )));
    }
    Ok(())
}

pub(crate) fn check_kv_key(key: &[u8]) -> Result<(), EngineError> {
    if key.is_empty() || key.len() > KV_KEY_BYTES_MAX {
        return Err(EngineError::Limit {
            what: "a key's bytes (1..=256)",
            limit: KV_KEY_BYTES_MAX,
        });
    }
    Ok(())
}
