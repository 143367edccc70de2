//! Tenants in the engine (decision 0032 §1, build plan step 1's store part): a name gets a
//! dense TenantId once, in a tenant record; a context is created for a registered tenant and
//! keeps it; a fork of another tenant's turn or a clone of another tenant's context answers as
//! an absent one; all of it is in `turns.log`, so a reopen, `verify`, a backup and a standby's
//! ingest hold the same tenants (a standby registers none itself); a registration lost in a
//! crash was never answered and its id goes again; a context record naming a tenant no record
//! registered, or a damaged tenant record, is damage, named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{append, block_on, open};
use ctxstore_engine::contexts::ListQuery;
use ctxstore_engine::format::turn_log::{LOG_RECORD_BYTES, LogRecord};
use ctxstore_engine::streams::{NO_OWNER, StreamOwner, StreamRead};
use ctxstore_engine::tenants::TenantView;
use ctxstore_engine::watch::{WatchRead, WatchTarget};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, EngineConfig,
    EngineError, ErrorKind, NewContext, OpenError, Scope, TenantId, TurnId, TurnOptions, verify,
};

/// A context created through `tenant_id`'s handle.
fn create(engine: &Engine, tenant_id: TenantId, name: Option<&str>) -> ContextId {
    let new = NewContext {
        name: name.map(str::to_owned),
        ..NewContext::default()
    };
    let scoped = engine.scoped(tenant_id);
    block_on(scoped.create(new))
        .unwrap()
        .context
        .head
        .context_id
}

/// Two tenants registered, acme then globex.
fn acme_and_globex(engine: &Engine) -> (TenantId, TenantId) {
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let globex = block_on(engine.register_tenant("globex")).unwrap();
    (acme, globex)
}

/// Every page of `handle`'s listing of contexts with `tags`, `limit` a page, in order.
fn every_page(handle: &Engine, limit: u32, tags: &[(&str, &str)]) -> Vec<ContextId> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let query = ListQuery {
            limit,
            cursor: cursor.take(),
            tags: tags
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            ..ListQuery::default()
        };
        let page = handle.list_contexts(&query).unwrap();
        ids.extend(page.contexts.iter().map(|view| view.head.context_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
}

/// The owner of a context, as the store-wide handle sees it.
fn tenant_of(engine: &Engine, context: ContextId) -> TenantId {
    engine.context(&ContextRef::Id(context)).unwrap().tenant_id
}

#[test]
fn names_get_dense_ids_once_and_contexts_keep_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    assert!(engine.tenants().is_empty());
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let globex = block_on(engine.register_tenant("globex")).unwrap();
    assert_eq!((acme, globex), (TenantId(1), TenantId(2)));
    // Asked again: the same id, no new record.
    assert_eq!(block_on(engine.register_tenant("acme")).unwrap(), acme);
    assert_eq!(engine.tenant_by_name("globex"), Some(globex));
    assert_eq!(engine.tenant_by_name("initech"), None);
    for bad in ["", "Acme", "a b", "ümlaut", &"x".repeat(65)] {
        let refused = block_on(engine.register_tenant(bad)).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }

    let operator = create(&engine, TenantId::OPERATOR, Some("ops"));
    let mine = create(&engine, acme, Some("acme-main"));
    let theirs = create(&engine, globex, None);
    assert_eq!(tenant_of(&engine, operator), TenantId::OPERATOR);
    assert_eq!(tenant_of(&engine, mine), acme);
    assert_eq!(tenant_of(&engine, theirs), globex);
    let refused = block_on(engine.scoped(TenantId(9)).create_context()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument);

    let turn = append(&engine, mine, b"acme's first turn", None)
        .unwrap()
        .turn
        .turn_id;
    engine.shutdown();

    // Replayed from turns.log: the same ids, names and owners; the next id goes on.
    let engine = open(dir.path());
    let expected = vec![
        TenantView {
            tenant_id: acme,
            name: "acme".into(),
            deleted: false,
        },
        TenantView {
            tenant_id: globex,
            name: "globex".into(),
            deleted: false,
        },
    ];
    assert_eq!(engine.tenants(), expected);
    assert_eq!(tenant_of(&engine, mine), acme);
    assert_eq!(tenant_of(&engine, theirs), globex);
    assert_eq!(
        block_on(engine.register_tenant("initech")).unwrap(),
        TenantId(3)
    );
    // A fork of acme's turn, by acme: its tenant.
    let fork = block_on(engine.scoped(acme).fork(turn)).unwrap();
    assert_eq!(tenant_of(&engine, fork.context_id), acme);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok() && report.notes.is_empty(), "{report}");
    assert_eq!(report.contexts, 4);
}

#[test]
fn another_tenants_turn_or_context_is_absent_to_a_fork_or_a_clone() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (acme, globex) = acme_and_globex(&engine);
    let mine = create(&engine, acme, Some("acme-main"));
    let turn = append(&engine, mine, b"secret plan", None)
        .unwrap()
        .turn
        .turn_id;

    // globex forks acme's turn: exactly what a turn that does not exist answers.
    let fork = |tenant_id, base| block_on(engine.scoped(tenant_id).fork(base));
    let foreign = fork(globex, turn).unwrap_err();
    assert!(
        matches!(foreign, EngineError::TurnNotFound(t) if t == turn),
        "{foreign:?}"
    );
    assert!(matches!(
        fork(TenantId::OPERATOR, turn),
        Err(EngineError::TurnNotFound(_))
    ));
    let own = fork(acme, turn).unwrap();
    assert_eq!(tenant_of(&engine, own.context_id), acme);

    // globex clones acme's context, by id and by name: absent, as one that does not exist.
    let clone = |tenant_id, source: ContextRef| {
        block_on(engine.scoped(tenant_id).create(NewContext {
            clone_from: Some(source),
            ..NewContext::default()
        }))
    };
    let by_id = clone(globex, ContextRef::Id(mine)).unwrap_err();
    assert!(
        matches!(by_id, EngineError::ContextNotFound(c) if c == mine),
        "{by_id:?}"
    );
    let by_name = clone(globex, ContextRef::Name("acme-main".into())).unwrap_err();
    let absent = clone(globex, ContextRef::Name("no-such-context".into())).unwrap_err();
    assert_eq!(by_name.kind(), ErrorKind::NotFound);
    assert_eq!(
        by_name.to_string().replace("acme-main", "NAME"),
        absent.to_string().replace("no-such-context", "NAME")
    );
    let cloned = clone(acme, ContextRef::Id(mine)).unwrap().context;
    assert_eq!(cloned.tenant_id, acme);
    assert_eq!(cloned.head.head_turn_id, turn);
    engine.shutdown();
}

#[test]
fn a_backup_holds_the_tenants_and_a_context_of_an_unregistered_tenant_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let mine = create(&engine, acme, None);
    append(&engine, mine, b"kept", None).unwrap();
    let copy = tempfile::tempdir().unwrap();
    let target = copy.path().join("backup");
    engine.backup(&target).unwrap();
    engine.shutdown();
    let restored = open(&target);
    assert_eq!(restored.tenant_by_name("acme"), Some(acme));
    assert_eq!(tenant_of(&restored, mine), acme);
    restored.shutdown();

    // Give the context record tenant 2 (its CRC made right): no record registered tenant 2.
    let log_path = dir.path().join("turns.log");
    let mut log = std::fs::read(&log_path).unwrap();
    let mut found = None;
    for (index, slot) in log.chunks_exact(LOG_RECORD_BYTES).enumerate() {
        let slot: &[u8; LOG_RECORD_BYTES] = slot.try_into().unwrap();
        if let Ok(Some(LogRecord::Context(context))) = LogRecord::decode(slot) {
            found = Some((index, context));
        }
    }
    let (index, mut context) = found.expect("the context record");
    assert_eq!(context.tenant_id, acme);
    context.tenant_id = TenantId(2);
    let slot: &mut [u8; LOG_RECORD_BYTES] = (&mut log
        [index * LOG_RECORD_BYTES..(index + 1) * LOG_RECORD_BYTES])
        .try_into()
        .unwrap();
    LogRecord::Context(context).encode(slot);
    std::fs::write(&log_path, &log).unwrap();
    let refused = ctxstore_engine::Engine::open(common::config(dir.path())).unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(refused, OpenError::Corrupt(_)) && message.contains("tenant 2"),
        "{message}"
    );
    let report = verify(dir.path()).unwrap();
    assert!(!report.is_ok(), "{report}");
    assert!(
        report
            .problems
            .iter()
            .any(|problem| problem.contains("tenant 2")),
        "{report}"
    );
}

#[test]
fn a_standby_takes_the_tenants_from_the_log_it_follows_and_registers_none_itself() {
    let primary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let acme = block_on(primary.register_tenant("acme")).unwrap();
    let mine = create(&primary, acme, Some("acme-main"));
    let ops = create(&primary, TenantId::OPERATOR, None);
    let next = primary.id_floors().records;
    primary.shutdown();

    let standby_dir = tempfile::tempdir().unwrap();
    let standby = Engine::open(EngineConfig {
        follower: true,
        ..common::config(standby_dir.path())
    })
    .unwrap();
    let ingested =
        block_on(standby.ingest_log(1, common::log_slots(primary_dir.path(), next))).unwrap();
    assert_eq!(ingested.log_records, next - 1);
    assert_eq!(standby.tenant_by_name("acme"), Some(acme));
    assert_eq!(tenant_of(&standby, mine), acme);
    assert_eq!(tenant_of(&standby, ops), TenantId::OPERATOR);
    // A standby writes nothing of its own: a new name is refused as any write is.
    let refused = block_on(standby.register_tenant("globex")).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
    assert_eq!(standby.tenant_by_name("globex"), None);
    standby.shutdown();
    let report = verify(standby_dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_tenant_record_lost_in_a_crash_is_never_registered_and_a_damaged_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    assert_eq!(
        block_on(engine.register_tenant("acme")).unwrap(),
        TenantId(1)
    );
    engine.shutdown();
    let log_path = dir.path().join("turns.log");
    let written = std::fs::read(&log_path).unwrap();
    let slot: &[u8; LOG_RECORD_BYTES] = written[..LOG_RECORD_BYTES].try_into().unwrap();
    assert!(matches!(
        LogRecord::decode(slot),
        Ok(Some(LogRecord::Meta(_)))
    ));

    // Half of the slot changed: a 128-byte record never straddles a sector, so no torn
    // write leaves this; it is damage, named with its file and offset.
    let mut damaged = written.clone();
    damaged[LOG_RECORD_BYTES / 2..LOG_RECORD_BYTES].fill(0);
    std::fs::write(&log_path, &damaged).unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|problem| problem.contains("turns.log at offset 0")),
        "{report}"
    );

    // The slot never reached the disk (a crash before the batch's fdatasync, so the
    // registration was never answered): no tenant, and the id is given again.
    let mut lost = written;
    lost[..LOG_RECORD_BYTES].fill(0);
    std::fs::write(&log_path, &lost).unwrap();
    assert!(verify(dir.path()).unwrap().is_ok());
    let engine = open(dir.path());
    assert!(engine.tenants().is_empty());
    assert_eq!(
        block_on(engine.register_tenant("globex")).unwrap(),
        TenantId(1)
    );
    engine.shutdown();
    let engine = open(dir.path());
    assert_eq!(engine.tenant_by_name("globex"), Some(TenantId(1)));
    assert_eq!(engine.tenant_by_name("acme"), None);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn names_listings_and_ids_are_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (acme, globex) = acme_and_globex(&engine);
    let (as_acme, as_globex, as_operator) = (
        engine.scoped(acme),
        engine.scoped(globex),
        engine.scoped(TenantId::OPERATOR),
    );
    assert_eq!(as_acme.scope(), Scope::Tenant(acme));
    assert_eq!(engine.scope(), Scope::Store);
    // Each tenant may have its own `main`; each sees its own.
    let acme_main = create(&engine, acme, Some("main"));
    let globex_main = create(&engine, globex, Some("main"));
    let operator_main = create(&engine, TenantId::OPERATOR, Some("main"));
    let by_name = |handle: &Engine| handle.resolve(&ContextRef::Name("main".into())).unwrap();
    assert_eq!(by_name(&as_acme), acme_main);
    assert_eq!(by_name(&as_globex), globex_main);
    assert_eq!(by_name(&as_operator), operator_main);
    // A name is taken in its own tenant's names only.
    let again = block_on(as_acme.create(NewContext {
        name: Some("main".into()),
        ..NewContext::default()
    }))
    .unwrap_err();
    assert!(matches!(again, EngineError::NameTaken { context_id, .. } if context_id == acme_main));
    // get-or-create answers the tenant's own context.
    let got = block_on(as_globex.create(NewContext {
        name: Some("main".into()),
        get_or_create: true,
        ..NewContext::default()
    }))
    .unwrap();
    assert!(!got.created);
    assert_eq!(got.context.head.context_id, globex_main);

    // By id: another tenant's context answers as one that does not exist.
    let foreign = as_globex.context(&ContextRef::Id(acme_main)).unwrap_err();
    let absent = as_globex
        .context(&ContextRef::Id(ContextId(999)))
        .unwrap_err();
    assert!(matches!(foreign, EngineError::ContextNotFound(c) if c == acme_main));
    assert_eq!(
        foreign.to_string().replace(&acme_main.to_string(), "N"),
        absent.to_string().replace("999", "N")
    );
    assert!(matches!(
        as_operator.context(&ContextRef::Id(acme_main)),
        Err(EngineError::ContextNotFound(_))
    ));
    // The store-wide handle sees every context by id.
    assert_eq!(tenant_of(&engine, acme_main), acme);

    // Listings: a tenant's pages hold its contexts only, whatever the limit and cursor.
    for _ in 0..3 {
        create(&engine, acme, None);
        create(&engine, globex, None);
    }
    let listed = |handle: &Engine, limit: u32| every_page(handle, limit, &[]);
    for limit in [1, 2, 100] {
        let mine = listed(&as_acme, limit);
        assert_eq!(mine.len(), 4, "limit {limit}");
        assert!(mine.iter().all(|&id| tenant_of(&engine, id) == acme));
        assert_eq!(listed(&as_globex, limit).len(), 4);
        assert_eq!(listed(&as_operator, limit), vec![operator_main]);
    }
    let named = ListQuery {
        limit: 10,
        name_prefix: Some("ma".into()),
        ..ListQuery::default()
    };
    let page = as_acme.list_contexts(&named).unwrap();
    let ids: Vec<_> = page
        .contexts
        .iter()
        .map(|view| view.head.context_id)
        .collect();
    assert_eq!(ids, vec![acme_main]);
    engine.shutdown();
    // Names per tenant survive a reopen (replayed with each context's tenant).
    let engine = open(dir.path());
    let globex_again = engine
        .scoped(globex)
        .resolve(&ContextRef::Name("main".into()));
    assert_eq!(globex_again.unwrap(), globex_main);

    // Each tenant's live contexts, in ContextID order, walked from its own set: a tag shared
    // by both tenants, a deletion, and replay keep every page exact.
    let (as_acme, as_globex) = (engine.scoped(acme), engine.scoped(globex));
    let tagged = |handle: &Engine| {
        let new = NewContext {
            tags: vec![("team".into(), "blue".into())],
            ..NewContext::default()
        };
        block_on(handle.create(new))
            .unwrap()
            .context
            .head
            .context_id
    };
    let (acme_blue, globex_blue) = (tagged(&as_acme), tagged(&as_globex));
    let acme_all = listed(&as_acme, 100);
    let gone = acme_all[1];
    block_on(as_acme.delete_context(&ContextRef::Id(gone))).unwrap();
    let live = |handle: &Engine, tenant_id: TenantId, tags: &[(&str, &str)]| {
        let expected: Vec<ContextId> = (1..=20)
            .map(ContextId)
            .filter(|&id| {
                engine.context(&ContextRef::Id(id)).is_ok_and(|view| {
                    view.tenant_id == tenant_id
                        && tags.iter().all(|(key, value)| {
                            view.tags.get(*key).map(String::as_str) == Some(value)
                        })
                })
            })
            .collect();
        for limit in [1, 3, 100] {
            let ids = every_page(handle, limit, tags);
            assert_eq!(ids, expected, "{tenant_id:?} {tags:?} limit {limit}");
        }
        expected
    };
    assert!(!live(&as_acme, acme, &[]).contains(&gone));
    assert_eq!(live(&as_acme, acme, &[("team", "blue")]), vec![acme_blue]);
    assert_eq!(
        live(&as_globex, globex, &[("team", "blue")]),
        vec![globex_blue]
    );
    assert!(live(&as_acme, acme, &[("team", "red")]).is_empty());
    let before_reopen = (live(&as_acme, acme, &[]), live(&as_globex, globex, &[]));
    engine.shutdown();
    let engine = open(dir.path());
    let (as_acme, as_globex) = (engine.scoped(acme), engine.scoped(globex));
    let after_reopen = (listed(&as_acme, 2), listed(&as_globex, 2));
    assert_eq!(after_reopen, before_reopen);
    engine.shutdown();
}

/// An append of `payload` to `context` through `handle`, with `options`.
fn append_with(
    handle: &Engine,
    context: ContextId,
    payload: &[u8],
    options: TurnOptions,
) -> Result<ctxstore_engine::Appended, EngineError> {
    let request = AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 7,
        codec: 1,
        payload: AppendPayload::Bytes(Bytes::copy_from_slice(payload)),
        options,
    };
    block_on(handle.append(request))
}

/// What `result` says with `id` (a ContextID, TurnID, StreamID or blob hash) written as `N`:
/// another tenant's id must answer exactly as an absent one, whatever the id.
fn said<T: std::fmt::Debug>(result: Result<T, EngineError>, id: impl std::fmt::Display) -> String {
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    error.to_string().replace(&id.to_string(), "N")
}

#[test]
fn turns_reads_appends_links_overlays_and_finds_are_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (acme, globex) = acme_and_globex(&engine);
    let (as_acme, as_globex) = (engine.scoped(acme), engine.scoped(globex));
    let mine = create(&engine, acme, Some("acme-main"));
    let theirs = create(&engine, globex, Some("globex-main"));
    let labelled = || TurnOptions {
        key: Some(Bytes::from_static(b"k-1")),
        labels: vec![("thread_id".into(), "t-1".into())],
        ..TurnOptions::default()
    };
    let secret = append_with(&as_acme, mine, b"acme's secret", labelled())
        .unwrap()
        .turn
        .turn_id;
    let public = append_with(&as_globex, theirs, b"globex's turn", labelled())
        .unwrap()
        .turn
        .turn_id;
    let absent_turn = TurnId(secret.0 + 1_000);
    let absent_context = ContextId(999);

    // Reads: another tenant's turn or context, exactly as an absent one.
    let pairs: [(String, String); 6] = [
        (
            said(block_on(as_globex.turn(secret)), secret.0),
            said(block_on(as_globex.turn(absent_turn)), absent_turn.0),
        ),
        (
            said(block_on(as_globex.chain(secret, 0, 10, true)), secret.0),
            said(
                block_on(as_globex.chain(absent_turn, 0, 10, true)),
                absent_turn.0,
            ),
        ),
        (
            said(as_globex.turn_extras(secret), secret.0),
            said(as_globex.turn_extras(absent_turn), absent_turn.0),
        ),
        (
            said(block_on(as_globex.head(mine)), mine.0),
            said(block_on(as_globex.head(absent_context)), absent_context.0),
        ),
        (
            said(block_on(as_globex.last(mine, 10, true)), mine.0),
            said(
                block_on(as_globex.last(absent_context, 10, true)),
                absent_context.0,
            ),
        ),
        (
            said(as_globex.turn_by_key(&ContextRef::Id(mine), b"k-1"), mine.0),
            said(
                as_globex.turn_by_key(&ContextRef::Id(absent_context), b"k-1"),
                absent_context.0,
            ),
        ),
    ];
    for (foreign, absent) in pairs {
        assert_eq!(foreign, absent);
    }
    // Writes: an append to, a link to, a redaction of another tenant's, as absent ones.
    assert_eq!(
        said(
            append_with(&as_globex, mine, b"intrusion", TurnOptions::default()),
            mine.0
        ),
        said(
            append_with(&as_globex, absent_context, b"x", TurnOptions::default()),
            absent_context.0
        )
    );
    let linking = |link| TurnOptions {
        links: vec![link],
        ..TurnOptions::default()
    };
    assert_eq!(
        said(
            append_with(&as_globex, theirs, b"l", linking(secret)),
            secret.0
        ),
        said(
            append_with(&as_globex, theirs, b"l", linking(absent_turn)),
            absent_turn.0
        )
    );
    assert_eq!(
        said(block_on(as_globex.redact_turn(secret)), secret.0),
        said(block_on(as_globex.redact_turn(absent_turn)), absent_turn.0)
    );
    // Nothing of the refused writes landed: acme's context reads as before.
    let acme_page = block_on(as_acme.last(mine, 10, true)).unwrap();
    assert_eq!(acme_page.turns.len(), 1);
    assert_eq!(
        acme_page.turns[0].payload.as_deref(),
        Some(&b"acme's secret"[..])
    );
    // A tenant links its own turns, and its own reads work.
    append_with(&as_acme, mine, b"linked", linking(secret)).unwrap();
    assert_eq!(block_on(as_acme.turn(secret)).unwrap().turn_id, secret);
    // find: the store-wide label index, each tenant's page of its own turns only.
    let found = |handle: &Engine| -> Vec<TurnId> {
        let page = handle
            .find_turns("thread_id", "t-1", TurnId::NONE, 10)
            .unwrap();
        page.turns.iter().map(|turn| turn.turn.turn_id).collect()
    };
    assert_eq!(found(&as_acme), vec![secret]);
    assert_eq!(found(&as_globex), vec![public]);
    assert_eq!(found(&engine), vec![public, secret]);
    engine.shutdown();
}

fn open_request(context_id: ContextId) -> AppendRequest<()> {
    AppendRequest {
        context_id,
        expected_head: None,
        type_tag: 9,
        codec: 2,
        payload: (),
        options: TurnOptions::default(),
    }
}

#[test]
fn streams_and_watches_are_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (acme, globex) = acme_and_globex(&engine);
    let (as_acme, as_globex) = (engine.scoped(acme), engine.scoped(globex));
    let start = engine.watch_position();
    let mine = create(&engine, acme, Some("acme-main"));
    let theirs = create(&engine, globex, Some("globex-main"));
    let stream = block_on(as_acme.open_stream(open_request(mine), StreamOwner::NONE))
        .unwrap()
        .stream_id;
    let bytes = Bytes::from_static(b"acme's tokens");
    block_on(as_acme.append_delta(stream, None, bytes, NO_OWNER)).unwrap();
    let absent = stream + 1_000;

    // Another tenant's stream answers exactly as an unknown one, for every call.
    let delta = |handle: &Engine, id| {
        block_on(handle.append_delta(id, None, Bytes::from_static(b"x"), NO_OWNER))
    };
    assert_eq!(
        said(delta(&as_globex, stream), stream),
        said(delta(&as_globex, absent), absent)
    );
    assert_eq!(
        said(as_globex.read_stream(stream, 0, 100), stream),
        said(as_globex.read_stream(absent, 0, 100), absent)
    );
    assert_eq!(
        said(block_on(as_globex.seal_stream(stream, NO_OWNER)), stream),
        said(block_on(as_globex.seal_stream(absent, NO_OWNER)), absent)
    );
    assert_eq!(
        said(block_on(as_globex.abort_stream(stream, NO_OWNER)), stream),
        said(block_on(as_globex.abort_stream(absent, NO_OWNER)), absent)
    );
    let intrusion = block_on(as_globex.open_stream(open_request(mine), StreamOwner::NONE));
    assert!(matches!(intrusion, Err(EngineError::ContextNotFound(c)) if c == mine));
    assert!(as_globex.open_streams(None, 0, 10).is_empty());
    assert!(as_globex.open_streams(Some(mine), 0, 10).is_empty());
    assert_eq!(as_acme.open_streams(None, 0, 10).len(), 1);
    // The stream went on untouched; its tenant seals it, and reads how it ended.
    let StreamRead::Open { bytes, .. } = as_acme.read_stream(stream, 0, 100).unwrap() else {
        panic!("the stream is open");
    };
    assert_eq!(&bytes[..], b"acme's tokens");
    block_on(as_acme.seal_stream(stream, NO_OWNER)).unwrap();
    assert!(matches!(
        as_acme.read_stream(stream, 0, 100).unwrap(),
        StreamRead::Ended(_)
    ));
    assert_eq!(
        said(as_globex.read_stream(stream, 0, 100), stream),
        said(as_globex.read_stream(absent, 0, 100), absent)
    );

    // Watches: every named context, as each tenant sees it.
    block_on(as_globex.update_tags(
        &ContextRef::Id(theirs),
        vec![("stage".into(), "done".into())],
        vec![],
        None,
    ))
    .unwrap();
    let watched = |handle: &Engine, target: &WatchTarget| -> Vec<ContextId> {
        match handle.watch_events(target, start, 100) {
            WatchRead::Events(events) => events.iter().map(|event| event.context_id).collect(),
            lagged => panic!("{lagged:?}"),
        }
    };
    let every_named = WatchTarget::NamePrefix(String::new());
    assert!(watched(&as_acme, &every_named).iter().all(|&c| c == mine));
    assert!(!watched(&as_acme, &every_named).is_empty());
    assert_eq!(watched(&as_globex, &every_named), vec![theirs]);
    assert!(watched(&as_globex, &WatchTarget::Context(mine)).is_empty());
    let both = watched(&engine, &every_named);
    assert!(both.contains(&mine) && both.contains(&theirs));
    engine.shutdown();
}

/// Every route to a blob by hash (decision 0032 §2 and §4): a tenant's blobs lie at its own
/// addresses, so another tenant's hash answers as an absent one on every route, the same
/// payload stored by two tenants is stored twice (no dedup across tenants, so no dedup flag
/// tells one what the other holds), chunked payloads, key-value values, patches and purges
/// stay in their tenant, and `verify`, a reopen and a collection read the addresses back.
#[test]
fn blobs_by_hash_are_per_tenant_and_never_deduplicated_across_tenants() {
    use common::{chat_payload, gc_config};
    use ctxstore_engine::{ChunkRef, PayloadMode};

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let (acme, globex) = (
        block_on(engine.register_tenant("acme")).unwrap(),
        block_on(engine.register_tenant("globex")).unwrap(),
    );
    let (a, b) = (engine.scoped(acme), engine.scoped(globex));
    let (a_context, b_context) = (create(&engine, acme, None), create(&engine, globex, None));

    // A small payload and a chunked one (over the chunk threshold), both acme's.
    let small = chat_payload(1, 3000);
    let large = chat_payload(2, 600_000);
    let absent = BlobHash::of(b"no tenant ever stored this");
    let mut acme_hashes = Vec::new();
    for payload in [&small, &large] {
        let appended = append_with(&a, a_context, payload, TurnOptions::default()).unwrap();
        let hash = BlobHash::of(payload);
        assert_eq!(
            appended.turn.payload_hash, hash,
            "the client's hash, not an address"
        );
        assert!(!appended.deduped);
        assert_eq!(&block_on(a.blob(hash)).unwrap()[..], &payload[..]);
        assert_eq!(
            block_on(a.turn(appended.turn.turn_id))
                .unwrap()
                .payload_hash,
            hash
        );
        acme_hashes.push(hash);
    }
    assert!(
        engine.stats().chunked_blobs >= 1,
        "the large payload is chunked"
    );

    // Through globex's handle (and the operator's), acme's hashes are absent, said as an
    // absent hash is said.
    let operator = engine.scoped(TenantId::OPERATOR);
    for handle in [&b, &operator] {
        for &hash in &acme_hashes {
            let expected = said(block_on(handle.blob(absent)), absent);
            assert_eq!(said(block_on(handle.blob(hash)), hash), expected);
            let stored = said(block_on(handle.blob_stored(absent)), absent);
            assert_eq!(said(block_on(handle.blob_stored(hash)), hash), stored);
            assert!(!block_on(handle.has_blob(hash)));
            assert_eq!(handle.blob_len(hash), None);
            let mut cache = ctxstore_engine::NoPayloadCache;
            let read = handle.read_payload(hash, PayloadMode::Raw, &mut cache);
            let read_absent = handle.read_payload(absent, PayloadMode::Raw, &mut cache);
            assert_eq!(said(read, hash), said(read_absent, absent));
            let purge = said(block_on(handle.purge_blob(hash)), hash);
            assert_eq!(purge, said(block_on(handle.purge_blob(absent)), absent));
            // An append by hash: the referenced blob is absent.
            let context = if handle.scope() == Scope::Tenant(globex) {
                b_context
            } else {
                create(&engine, TenantId::OPERATOR, None)
            };
            let by_hash = |hash| {
                let request = AppendRequest {
                    context_id: context,
                    expected_head: None,
                    type_tag: 7,
                    codec: 1,
                    payload: AppendPayload::StoredBlob(hash),
                    options: TurnOptions::default(),
                };
                block_on(handle.append(request)).map(drop)
            };
            assert_eq!(said(by_hash(hash), hash), said(by_hash(absent), absent));
            // A chunked put naming acme's chunks without sending them: every chunk missing.
            let chunks = vec![ChunkRef {
                hash,
                len: small.len() as u32,
            }];
            let missing = block_on(handle.put_chunked(BlobHash::of(b"x"), None, chunks, vec![]));
            assert!(
                matches!(missing, Err(EngineError::MissingChunks { ref missing }) if missing == &[0]),
                "{missing:?}"
            );
        }
    }

    // Globex stores the same payloads: stored again, not a dedup hit; both read back.
    let blobs_before = engine.stats().blobs;
    for payload in [&small, &large] {
        let appended = append_with(&b, b_context, payload, TurnOptions::default()).unwrap();
        assert!(!appended.deduped, "no dedup across tenants");
        assert_eq!(appended.turn.payload_hash, BlobHash::of(payload));
        // Its own second copy is a dedup hit.
        assert!(
            append_with(&b, b_context, payload, TurnOptions::default())
                .unwrap()
                .deduped
        );
    }
    assert!(
        engine.stats().blobs > blobs_before + 1,
        "stored again, in globex's space"
    );
    let (put_hash, deduped) = block_on(b.put_blob(Bytes::from(small.clone()))).unwrap();
    assert_eq!((put_hash, deduped), (acme_hashes[0], true));

    // Key-value values and patches: the caller's hashes out, the tenant's addresses inside.
    let value = Bytes::from_static(b"{\"theme\":\"dark\"}");
    block_on(a.kv_put(
        &ContextRef::Id(a_context),
        vec![(b"prefs".to_vec(), value.clone())],
        false,
    ))
    .unwrap();
    let item = a
        .kv_get(&ContextRef::Id(a_context), b"prefs")
        .unwrap()
        .unwrap();
    assert_eq!(item.value_hash, BlobHash::of(&value));
    assert_eq!(block_on(a.blob(item.value_hash)).unwrap(), value);
    assert!(!block_on(b.has_blob(item.value_hash)));
    let turn = append_with(&a, a_context, b"to be patched", TurnOptions::default())
        .unwrap()
        .turn
        .turn_id;
    let patched = block_on(a.patch_turn(turn, Bytes::from_static(b"patched"))).unwrap();
    assert_eq!(patched.turn.payload_hash, BlobHash::of(b"patched"));
    assert!(!block_on(b.has_blob(BlobHash::of(b"patched"))));

    // Acme purges its small payload: globex's copy stays.
    let purged = block_on(a.purge_blob(acme_hashes[0])).unwrap();
    assert_eq!(purged.payload_hash, acme_hashes[0]);
    assert!(!block_on(a.has_blob(acme_hashes[0])));
    assert_eq!(&block_on(b.blob(acme_hashes[0])).unwrap()[..], &small[..]);

    // Reopened and verified: every record checks against its tenant's address.
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let (a, b) = (engine.scoped(acme), engine.scoped(globex));
    assert_eq!(&block_on(a.blob(acme_hashes[1])).unwrap()[..], &large[..]);
    assert_eq!(&block_on(b.blob(acme_hashes[1])).unwrap()[..], &large[..]);

    // Acme's context deleted and collected: its copies go, globex's stay.
    block_on(a.delete_context(&ContextRef::Id(a_context))).unwrap();
    engine.gc().unwrap();
    assert!(!block_on(a.has_blob(acme_hashes[1])));
    assert_eq!(&block_on(b.blob(acme_hashes[1])).unwrap()[..], &large[..]);
    engine.shutdown();
}

/// A tenant's `quota_contexts` and `quota_streams` (decision 0032 §3) at their edge: many
/// creates at once from as many tasks pass exactly up to the limit and the rest are
/// QUOTA_EXCEEDED naming the quota, its limit and the usage; a delete (a seal, an abort)
/// makes room; another tenant and the operator are not held to it; a reopen counts the
/// same; limits changed by `set_quotas` hold from the next write.
#[test]
fn quotas_hold_at_their_edge_under_concurrent_writers_and_across_a_reopen() {
    use ctxstore_engine::quota::{Quota, TenantQuotas};
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (acme, globex) = acme_and_globex(&engine);
    let limits = TenantQuotas {
        contexts: Some(5),
        streams: Some(2),
        bytes: None,
    };
    engine.set_quotas(&[("acme".into(), limits)]);
    let as_acme = engine.scoped(acme);

    // 16 creates at once: 5 pass, 11 meet the quota, none is partly written.
    let results: Vec<_> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..16)
            .map(|i| {
                let as_acme = &as_acme;
                scope.spawn(move || block_on(as_acme.create(named(&format!("c{i}")))))
            })
            .collect();
        writers
            .into_iter()
            .map(|writer| writer.join().unwrap())
            .collect()
    });
    let created: Vec<ContextId> = results
        .iter()
        .filter_map(|result| result.as_ref().ok())
        .map(|created| created.context.head.context_id)
        .collect();
    assert_eq!(created.len(), 5);
    for result in results.iter().filter(|result| result.is_err()) {
        let Err(EngineError::QuotaExceeded(refused)) = result else {
            panic!("{result:?}");
        };
        assert_eq!(refused.quota, Quota::Contexts);
        assert_eq!((refused.limit, refused.usage), (5, 5));
        assert_eq!(refused.tenant, "acme");
        assert_eq!(
            result.as_ref().unwrap_err().kind(),
            ErrorKind::QuotaExceeded
        );
    }
    let query = ListQuery {
        limit: 100,
        ..ListQuery::default()
    };
    let listed = as_acme.list_contexts(&query).unwrap();
    assert_eq!(listed.contexts.len(), 5, "a refused create left nothing");
    assert_eq!(engine.tenant_usage(acme).contexts, 5);
    // Others are not held to acme's quota.
    create(&engine, globex, None);
    create(&engine, TenantId::OPERATOR, None);

    // Streams: two open, the third refused; an abort makes room.
    let open_on = |context| block_on(as_acme.open_stream(open_request(context), StreamOwner::NONE));
    let first = open_on(created[0]).unwrap().stream_id;
    open_on(created[1]).unwrap();
    let refused = open_on(created[2]).unwrap_err();
    assert!(
        matches!(&refused, EngineError::QuotaExceeded(q) if q.quota == Quota::Streams),
        "{refused}"
    );
    assert_eq!(engine.tenant_usage(acme).streams_open, 2);
    block_on(as_acme.abort_stream(first, NO_OWNER)).unwrap();
    open_on(created[2]).unwrap();

    // A delete gives a context back.
    block_on(as_acme.delete_context(&ContextRef::Id(created[4]))).unwrap();
    assert!(block_on(as_acme.create(named("again"))).is_ok());
    assert!(block_on(as_acme.create(named("over"))).is_err());
    engine.shutdown();

    // Replayed: the same usage; the limits are the server's to set again.
    let engine = open(dir.path());
    assert_eq!(
        engine.tenant_usage(acme),
        ctxstore_engine::tenants::TenantUsage {
            contexts: 5,
            streams_open: 2,
            bytes: engine.tenant_usage(acme).bytes,
        }
    );
    let as_acme = engine.scoped(acme);
    assert!(block_on(as_acme.create(named("unlimited"))).is_ok());
    engine.set_quotas(&[("acme".into(), limits)]);
    assert_eq!(engine.quotas_of("acme"), limits);
    let refused = block_on(as_acme.create(named("over"))).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::QuotaExceeded);
    engine.set_quotas(&[]);
    assert!(block_on(as_acme.create(named("lifted"))).is_ok());
    engine.shutdown();
}

fn named(name: &str) -> NewContext {
    NewContext {
        name: Some(name.to_owned()),
        ..NewContext::default()
    }
}

/// `quota_bytes` (decision 0032 §3): the stored bytes of a tenant's blobs, every shard's.
/// Appends of new payloads racing on many shards pass exactly up to the limit and the rest are
/// refused with nothing written; a dedup hit adds nothing and passes at the limit; another
/// tenant is not held; a reopen counts the same; a collection of deleted contexts gives the
/// bytes back; an index written before entries named tenants is rebuilt at open and counts
/// the same.
#[test]
fn quota_bytes_holds_across_shards_and_a_reopen_and_a_collection_gives_bytes_back() {
    use ctxstore_engine::quota::{Quota, TenantQuotas};
    const LEN: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(common::gc_config(dir.path()).with_shards(4)).unwrap();
    let (acme, globex) = acme_and_globex(&engine);
    let as_acme = engine.scoped(acme);
    let context = create(&engine, acme, None);
    let store_first = |handle: &Engine| {
        let payload = common::random_payload(1, LEN);
        append_with(handle, context, &payload, TurnOptions::default())
    };
    store_first(&as_acme).unwrap();
    let record = engine.tenant_usage(acme).bytes;
    assert!(record > LEN as u64, "a record holds its header: {record}");

    // Room for five more records, and sixteen appends on as many contexts at once.
    let quotas = TenantQuotas {
        bytes: Some(6 * record),
        ..TenantQuotas::default()
    };
    engine.set_quotas(&[("acme".into(), quotas)]);
    let contexts: Vec<ContextId> = (0..16).map(|_| create(&engine, acme, None)).collect();
    let results: Vec<_> = std::thread::scope(|scope| {
        let writers: Vec<_> = contexts
            .iter()
            .enumerate()
            .map(|(i, context)| {
                let as_acme = &as_acme;
                scope.spawn(move || {
                    let payload = common::random_payload(100 + i as u64, LEN);
                    append_with(as_acme, *context, &payload, TurnOptions::default())
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|writer| writer.join().unwrap())
            .collect()
    });
    assert_eq!(results.iter().filter(|result| result.is_ok()).count(), 5);
    for (result, context) in results.iter().zip(&contexts) {
        match result {
            Ok(_) => {}
            Err(EngineError::QuotaExceeded(refused)) => {
                assert_eq!((refused.quota, refused.limit), (Quota::Bytes, 6 * record));
                let head = engine.context(&ContextRef::Id(*context)).unwrap().head;
                assert_eq!(head.head_turn_id, TurnId::NONE, "nothing was written");
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(engine.tenant_usage(acme).bytes, 6 * record);
    // At the limit: a payload stored already passes (no new bytes); a new one does not.
    store_first(&as_acme).unwrap();
    let refused = append_with(&as_acme, context, b"new", TurnOptions::default()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::QuotaExceeded);
    // Another tenant is not held to acme's quota.
    let theirs = create(&engine, globex, None);
    append_with(
        &engine.scoped(globex),
        theirs,
        &common::random_payload(9, LEN),
        TurnOptions::default(),
    )
    .unwrap();
    engine.shutdown();

    // Reopened: the same bytes; the limits are the server's to set again.
    let engine = Engine::open(common::gc_config(dir.path()).with_shards(4)).unwrap();
    assert_eq!(engine.tenant_usage(acme).bytes, 6 * record);
    engine.set_quotas(&[("acme".into(), quotas)]);
    let as_acme = engine.scoped(acme);
    assert!(append_with(&as_acme, context, b"new", TurnOptions::default()).is_err());

    // Deleted and collected, the bytes come back.
    for context in contexts.iter().chain([&context]) {
        block_on(as_acme.delete_context(&ContextRef::Id(*context))).unwrap();
    }
    engine.gc().unwrap();
    assert_eq!(engine.tenant_usage(acme).bytes, 0);
    let fresh = create(&engine, acme, None);
    append_with(&as_acme, fresh, b"new", TurnOptions::default()).unwrap();
    let globex_bytes = engine.tenant_usage(globex).bytes;
    let acme_bytes = engine.tenant_usage(acme).bytes;
    engine.shutdown();

    // An index from before entries named tenants: rebuilt from the packs at open.
    let store = ctxstore_engine::store_dir::StoreDir::new(dir.path());
    let mut rewritten = 0;
    for shard in 0..4 {
        let path = store.blob_index_path(shard);
        let mut bytes = std::fs::read(&path).unwrap();
        for entry in bytes.chunks_exact_mut(64) {
            if entry.iter().all(|byte| *byte == 0) {
                break;
            }
            entry[54..60].fill(0);
            let crc = crc32c::crc32c(&entry[..60]);
            entry[60..].copy_from_slice(&crc.to_le_bytes());
            rewritten += 1;
        }
        std::fs::write(&path, bytes).unwrap();
    }
    assert!(rewritten > 0);
    assert!(verify(dir.path()).unwrap().is_ok());
    let engine = Engine::open(common::gc_config(dir.path()).with_shards(4)).unwrap();
    assert_eq!(engine.tenant_usage(globex).bytes, globex_bytes);
    assert_eq!(engine.tenant_usage(acme).bytes, acme_bytes);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

/// A tenant deleted in a store that seals nothing (decision 0032 §6): one tenant-deleted
/// record (op 21) deletes its contexts, whatever their names or entries; replay and a
/// standby's ingest apply it alike; the next collection takes every byte of it from the packs
/// (a marker in its payloads is in no file afterwards), the other tenant's stay; the tenant
/// creates nothing more and its name is never a fresh tenant's.
#[test]
fn deleting_a_tenant_deletes_its_contexts_and_a_collection_takes_its_bytes() {
    let marker = b"MARKER-erase-me-0d1e7e";
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(common::gc_config(dir.path())).unwrap();
    let (acme, globex) = acme_and_globex(&engine);
    let mine = create(&engine, acme, Some("main"));
    let other = create(&engine, acme, None);
    let theirs = create(&engine, globex, Some("main"));
    let payload = |seed: u8| [marker.as_slice(), &[seed; 3000]].concat();
    append(&engine.scoped(acme), mine, &payload(1), None).unwrap();
    append(&engine.scoped(acme), other, &payload(2), None).unwrap();
    append(&engine.scoped(globex), theirs, b"globex keeps this", None).unwrap();
    let entries = vec![(b"memory".to_vec(), Bytes::from(payload(3)))];
    block_on(
        engine
            .scoped(acme)
            .kv_put(&ContextRef::Id(mine), entries, false),
    )
    .unwrap();
    assert_eq!(engine.tenant_usage(acme).contexts, 2);

    assert_eq!(block_on(engine.delete_tenant("acme")).unwrap(), acme);
    let gone = |engine: &Engine| {
        let scoped = engine.scoped(acme);
        for context in [mine, other] {
            let answer = block_on(scoped.last(context, 1, true));
            assert_eq!(answer.unwrap_err().kind(), ErrorKind::NotFound);
        }
        assert!(scoped.resolve(&ContextRef::Name("main".into())).is_err());
        assert!(block_on(scoped.create(NewContext::default())).is_err());
        assert_eq!(engine.tenant_usage(acme).contexts, 0);
        assert!(engine.tenant_deleted(acme) && !engine.tenant_deleted(globex));
        let kept = block_on(engine.scoped(globex).last(theirs, 1, true)).unwrap();
        assert_eq!(
            kept.turns[0].payload.as_deref(),
            Some(&b"globex keeps this"[..])
        );
    };
    gone(&engine);
    assert_eq!(block_on(engine.register_tenant("acme")).unwrap(), acme);
    engine.shutdown();
    let engine = Engine::open(common::gc_config(dir.path())).unwrap();
    gone(&engine);
    engine.gc().unwrap();
    assert_eq!(engine.tenant_usage(acme).bytes, 0);
    engine.shutdown();
    let holding = ctxstore_testsupport::files_holding(dir.path(), marker);
    assert_eq!(
        holding,
        Vec::<String>::new(),
        "a collection took every byte of it"
    );
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");

    // A standby's ingest applies the deletion as replay does (a log without payloads: the
    // standby's packs come from the replica, not here).
    let primary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let (acme, _) = acme_and_globex(&primary);
    let mine = create(&primary, acme, Some("main"));
    block_on(primary.delete_tenant("acme")).unwrap();
    let next = primary.id_floors().records;
    primary.shutdown();
    let slots = common::log_slots(primary_dir.path(), next);
    let standby_dir = tempfile::tempdir().unwrap();
    let standby = Engine::open(EngineConfig {
        follower: true,
        ..common::config(standby_dir.path())
    })
    .unwrap();
    block_on(standby.ingest_log(1, slots)).unwrap();
    assert!(standby.tenant_deleted(acme));
    let answer = block_on(standby.scoped(acme).last(mine, 1, true));
    assert_eq!(answer.unwrap_err().kind(), ErrorKind::NotFound);
    let refused = block_on(standby.delete_tenant("globex")).unwrap_err();
    assert!(
        matches!(refused.kind(), ErrorKind::ReadOnly | ErrorKind::NotPrimary),
        "{refused}"
    );
    standby.shutdown();
}
