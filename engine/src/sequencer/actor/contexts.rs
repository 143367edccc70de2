//! The sequencer's rules for contexts: creating one (empty, a fork of a durable turn, or a
//! clone; with a name and tags), metadata changes (all or none, against the expected head),
//! and retention (a delete, or a floor decided against the sequencer's own heads).

use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, KvEntry, KvExpiry};
use crate::format::turn_log::{ContextRecord, LogRecord};
use crate::ids::{ContextId, TurnId};
use crate::model::{ContextHead, ContextView, Created, NewContext, Scope};
use crate::pipeline::{MetaReply, Retention};
use crate::quota::Quota;
use crate::sequencer::actor::{Answer, HeadMove, SequencerActor};
use crate::sequencer::contexts::check_new;
use crate::sequencer::heads::HeadState;
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    pub(super) fn create_context(
        &mut self,
        new: NewContext,
        scope: Scope,
    ) -> Result<Created, EngineError> {
        self.check_takes_ids(true)?;
        let tenant_id = scope.tenant_id();
        if !self.contexts.tenants.exists(tenant_id) {
            return Err(EngineError::InvalidArgument(format!(
                "tenant {tenant_id} is not registered (Engine::register_tenant gives a name its \
                 id)"
            )));
        }
        if self.contexts.tenants.is_deleted(tenant_id) {
            return Err(EngineError::InvalidArgument(format!(
                "tenant {tenant_id} was deleted: it creates nothing more"
            )));
        }
        if let Some(owner) = new
            .name
            .as_deref()
            .and_then(|name| self.contexts.by_name(tenant_id, name))
            && new.get_or_create
        {
            let context = self.view(owner);
            assert!(context.is_some(), "a named context exists");
            return context
                .map(|context| Created {
                    context,
                    created: false,
                })
                .ok_or(EngineError::ContextNotFound(owner));
        }
        check_new(&self.contexts, tenant_id, new.name.as_deref(), &new.tags)?;
        self.check_quota(Quota::Contexts, tenant_id)?;
        let clone_from = self.clone_source(new.clone_from, scope)?;
        let head = self.new_head(clone_from, new.base, scope)?;
        let Some(context_id) = self.heads.next_context_id() else {
            return Err(EngineError::InvalidArgument(format!(
                "the store holds the maximum of {} contexts",
                crate::ids::CONTEXTS_MAX
            )));
        };
        let now = now_unix_ms();
        self.push_record(&LogRecord::Context(ContextRecord {
            record_id: self.next_record_id,
            context_id,
            head_turn_id: head.head_turn_id,
            head_depth: head.head_depth,
            created_at_unix_ms: now,
            tenant_id,
        }));
        let created = self.heads.create(head);
        assert_eq!(created, context_id);
        self.contexts
            .create(context_id, head.head_turn_id, tenant_id, now);
        let mut changes = Vec::new();
        changes.extend(clone_from.map(ContextMeta::CloneFrom));
        changes.extend(new.name.map(ContextMeta::Name));
        if !new.tags.is_empty() {
            let tags = new.tags.into_iter().map(|(k, v)| (k, Some(v))).collect();
            changes.push(ContextMeta::Tags(tags));
        }
        for change in &changes {
            // Checked above: a refusal here is a broken invariant, not bad input.
            let applied = self.contexts.apply(context_id, change, now);
            assert!(applied.is_ok(), "checked metadata refused: {applied:?}");
            self.push_meta(context_id, change, now);
        }
        let context = self
            .view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        Ok(Created {
            context,
            created: true,
        })
    }

    /// The context a new context clones, by id or by name, as `scope` sees it (another
    /// tenant's answers as an absent one does).
    fn clone_source(
        &self,
        clone_from: Option<crate::model::ContextRef>,
        scope: Scope,
    ) -> Result<Option<ContextId>, EngineError> {
        let visible = |source: ContextId| {
            self.contexts
                .get(source)
                .is_some_and(|info| scope.sees(info.tenant_id))
        };
        Ok(match clone_from {
            Some(crate::model::ContextRef::Id(source)) if visible(source) => Some(source),
            Some(crate::model::ContextRef::Id(source)) => {
                return Err(EngineError::ContextNotFound(source));
            }
            Some(crate::model::ContextRef::Name(name)) => Some(
                self.contexts
                    .by_name(scope.tenant_id(), &name)
                    .ok_or(EngineError::NameNotFound(name))?,
            ),
            None => None,
        })
    }

    /// A new context's head: its clone source's, a durable base turn, or none.
    fn new_head(
        &mut self,
        clone_from: Option<ContextId>,
        base: TurnId,
        scope: Scope,
    ) -> Result<HeadState, EngineError> {
        Ok(match clone_from {
            Some(_) if !base.is_none() => {
                return Err(EngineError::InvalidArgument(
                    "a clone takes its source's head; give no base turn".into(),
                ));
            }
            // A clone shares its source's head; its own turns start with its first append.
            Some(source) => self
                .heads
                .get(source)
                .ok_or(EngineError::ContextNotFound(source))?,
            // Only a durable turn can be a base: no one can know of any other.
            None if !base.is_none() => {
                self.gc.note_turn(base);
                if self.gc.dead.contains(base) {
                    return Err(EngineError::TurnNotFound(base));
                }
                let turn = self.published.turns.turn(base)?;
                // Another tenant's turn is absent to this one (decision 0032 §2).
                let owner = self
                    .contexts
                    .get(turn.context_id)
                    .map(|info| info.tenant_id);
                if !owner.is_some_and(|owner| scope.sees(owner)) {
                    return Err(EngineError::TurnNotFound(base));
                }
                HeadState {
                    head_turn_id: base,
                    head_depth: turn.depth,
                }
            }
            None => HeadState::default(),
        })
    }

    /// A metadata request: with `kv_if_absent`, puts of keys the context has are left out
    /// first; then the changes apply all or none, and the answer waits for the batch.
    pub(super) fn admit_meta(
        &mut self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        expected_head: Option<TurnId>,
        kv_if_absent: bool,
        reply: MetaReply,
    ) {
        let changes = if kv_if_absent {
            self.absent_only(context_id, changes)
        } else {
            changes
        };
        let result = self.change_meta(context_id, changes, expected_head);
        self.batch.answers.push(Answer::Meta(reply, result));
    }

    /// Applies metadata changes to one context, all or none.
    pub(super) fn change_meta(
        &mut self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        expected_head: Option<TurnId>,
    ) -> Result<ContextView, EngineError> {
        self.check_takes_ids(false)?;
        let head = self
            .heads
            .get(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        if let Some(expected) = expected_head
            && expected != head.head_turn_id
        {
            return Err(EngineError::Conflict {
                context_id,
                expected,
                actual: head.head_turn_id,
            });
        }
        for change in &changes {
            if let ContextMeta::KvPut(entries) = change {
                for entry in entries {
                    self.gc.name_blob(&entry.value_hash)?;
                    if let Some(vectors) = &entry.vectors {
                        self.gc.name_blob(&vectors.hash)?;
                    }
                }
            }
        }
        let now = now_unix_ms();
        let changes = self.resolve_expiries(context_id, changes, now);
        // Try them on a copy (O(1) with persistent maps), so that a refusal changes nothing.
        let mut scratch = self.contexts.clone();
        for change in &changes {
            scratch.apply(context_id, change, now)?;
        }
        for change in &changes {
            self.push_meta(context_id, change, now);
        }
        self.contexts = scratch;
        self.view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    /// Deletes a context or raises its floor (`Retention`), one metadata record.
    pub(super) fn retain(
        &mut self,
        context_id: ContextId,
        change: Retention,
    ) -> Result<ContextView, EngineError> {
        self.check_takes_ids(false)?;
        let before = self
            .view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        let meta = match change {
            Retention::Delete { updated_at_max } => {
                if updated_at_max.is_some_and(|max| before.updated_at_unix_ms > max) {
                    // Touched since the reaper looked: not idle any more.
                    return Err(EngineError::Conflict {
                        context_id,
                        expected: before.head.head_turn_id,
                        actual: before.head.head_turn_id,
                    });
                }
                ContextMeta::Delete
            }
            Retention::Prune { keep } => {
                assert!(keep >= 1, "the caller refuses keep = 0");
                let head = before.head;
                let floor = if head.head_turn_id.is_none() {
                    0
                } else {
                    (head.head_depth + 1).saturating_sub(keep)
                };
                ContextMeta::Floor(floor.max(before.floor_depth))
            }
        };
        let now = now_unix_ms();
        self.contexts.apply(context_id, &meta, now)?;
        self.push_meta(context_id, &meta, now);
        if meta == ContextMeta::Delete {
            let previous = self.heads.delete(context_id);
            self.batch.moves.push(HeadMove {
                context_id,
                previous,
            });
            return Ok(before);
        }
        self.view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    /// Key-value TTLs made instants by the sequencer's clock (decision 0028), so that the
    /// record carries them and replay needs no clock: a put's entries expire `ttl_ms` from
    /// now; a touch restarts the TTL given (0: the entry's own) of each live entry that has
    /// one, and drops the rest; an expire keeps the entries that still have the expiry the
    /// reaper saw, now past. A change left with no entry is dropped (no record).
    fn resolve_expiries(
        &self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        now_unix_ms: u64,
    ) -> Vec<ContextMeta> {
        let kv = self.contexts.get(context_id).map(|info| &info.kv);
        let live = |key: &[u8]| {
            kv.and_then(|kv| kv.get(key))
                .filter(|value| value.live_at(now_unix_ms))
        };
        changes
            .into_iter()
            .filter_map(|change| match change {
                ContextMeta::KvPut(mut entries) => {
                    for entry in &mut entries {
                        entry.expires_at_unix_ms = match entry.ttl_ms {
                            0 => 0,
                            ttl_ms => now_unix_ms.saturating_add(ttl_ms),
                        };
                    }
                    Some(ContextMeta::KvPut(entries))
                }
                ContextMeta::KvTouch(entries) => {
                    let touched: Vec<KvExpiry> = entries
                        .into_iter()
                        .filter_map(|entry| {
                            let value = live(&entry.key)?;
                            let ttl_ms = match entry.ttl_ms {
                                0 => value.ttl_ms,
                                given => given,
                            };
                            (ttl_ms > 0).then(|| KvExpiry {
                                key: entry.key,
                                ttl_ms,
                                expires_at_unix_ms: now_unix_ms.saturating_add(ttl_ms),
                            })
                        })
                        .collect();
                    (!touched.is_empty()).then_some(ContextMeta::KvTouch(touched))
                }
                ContextMeta::KvExpire(entries) => {
                    let expired: Vec<KvExpiry> = entries
                        .into_iter()
                        .filter(|entry| {
                            kv.and_then(|kv| kv.get(entry.key.as_slice()))
                                .is_some_and(|value| {
                                    value.expires_at_unix_ms == entry.expires_at_unix_ms
                                        && !value.live_at(now_unix_ms)
                                })
                        })
                        .collect();
                    (!expired.is_empty()).then_some(ContextMeta::KvExpire(expired))
                }
                other => Some(other),
            })
            .collect()
    }

    /// Key-value puts that keep existing keys: only the absent ones (or expired: no read
    /// sees them any more) are written.
    pub(super) fn absent_only(
        &self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
    ) -> Vec<ContextMeta> {
        let Some(info) = self.contexts.get(context_id) else {
            return changes;
        };
        let now = now_unix_ms();
        changes
            .into_iter()
            .filter_map(|change| match change {
                ContextMeta::KvPut(entries) => {
                    let absent: Vec<KvEntry> = entries
                        .into_iter()
                        .filter(|entry| {
                            info.kv
                                .get(entry.key.as_slice())
                                .is_none_or(|value| !value.live_at(now))
                        })
                        .collect();
                    (!absent.is_empty()).then_some(ContextMeta::KvPut(absent))
                }
                other => Some(other),
            })
            .collect()
    }

    /// A context's head and metadata as this batch leaves them.
    fn view(&self, context_id: ContextId) -> Option<ContextView> {
        let head = self.heads.get(context_id)?;
        let info = self.contexts.get(context_id)?;
        Some(info.view(ContextHead {
            context_id,
            head_turn_id: head.head_turn_id,
            head_depth: head.head_depth,
        }))
    }
}
