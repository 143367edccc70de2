//! Tenants through the protocol (issue 48, decision 0032 §1–§2): `--tenants-file` read at
//! start (a malformed file refuses the start, naming its line) and on SIGHUP (a malformed one
//! keeps the old in force, and the log says why); HELLO maps a token to its tenant; rights are
//! checked before the engine is asked; and the hostile-tenant suite: tenant B sends every
//! message of the message table with tenant A's ids, names, hashes, stream ids, watch targets
//! and labels, and every answer is exactly what the same message with an absent id gets (the
//! id aside), or empty. The match over `MessageType::ALL` has no wildcard, so a message added
//! to the table does not compile here until it has its hostile case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Raw, error_code, stream_open};
use ctxstore_protocol::streams::WatchTargetWire;
use ctxstore_protocol::{
    AdminRequest, BlobHash, ChunkWire, ContextRef, ErrorCode, ExtrasWire, MessageType, PageKind,
    ParentWire, PayloadSpec, Request, Response, TurnSpec,
};
use ctxstore_protocol::{
    admin, appends, blobs, contexts, kv, overlays, reads, retention, streams, vectors,
};
use ctxstore_testsupport::{ServerLaunch, TestServer};

const OPERATOR: &str = "operator-token-0123456789";
const ACME: &str = "acme-token-0123456789abcdef";
const GLOBEX: &str = "globex-token-0123456789abcd";
const READER: &str = "acme-reader-token-0123456789";

fn tenants_toml(extra: &str) -> String {
    format!(
        "[[tenant]]\nname = \"acme\"\ntokens = [\"{ACME}\"]\nrights = [\"read\", \"write\", \
         \"admin\"]\n\n[[tenant]]\nname = \"globex\"\ntokens = [\"{GLOBEX}\"]\nrights = \
         [\"read\", \"write\", \"admin\"]\n\n[[tenant]]\nname = \"acme-readers\"\ntokens = \
         [\"blake3:{}\"]\nrights = [\"read\"]\n{extra}",
        blake3::hash(READER.as_bytes()).to_hex()
    )
}

/// A server with the operator's token and `tenants` as its tenants file.
fn server(dir: &Path, tenants: &str) -> TestServer {
    let file = dir.join("tenants.toml");
    std::fs::write(&file, tenants).unwrap();
    ServerLaunch::new(env!("CARGO_BIN_EXE_ctxstore-server"))
        .token(Some(OPERATOR))
        .flags(&["--tenants-file", file.to_str().unwrap()])
        .keep_log()
        .start()
}

/// A connection that said HELLO with `token`.
fn connect(server: &TestServer, token: &str) -> Raw {
    let mut raw = Raw::connect(server.socket_addr());
    let hello = raw.hello(token.as_bytes());
    assert!(error_code(&hello).is_none(), "{token}: {hello:?}");
    raw
}

fn call(raw: &mut Raw, request: impl Into<Request>) -> Response {
    raw.call(7, &request.into())
}

/// What A's data is: a named, tagged context with turns (a key, a label), key-value
/// entries, a blob, an open stream and a sealed one.
struct Held {
    context: u64,
    turn: u64,
    hash: BlobHash,
    stream_open: u64,
    stream_sealed: u64,
}

fn fill(acme: &mut Raw) -> Held {
    let opened = call(
        acme,
        contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: None,
            name: Some("main".into()),
            tags: vec![("user".into(), "42".into())],
        },
    );
    let Response::Contexts(ctxstore_protocol::ContextsResponse::Opened(opened)) = opened else {
        panic!("{opened:?}")
    };
    let context = opened.info.head.context_id;
    let payload = Bytes::from_static(b"{\"role\":\"user\",\"content\":\"acme's secret\"}");
    let hash = BlobHash(*blake3::hash(&payload).as_bytes());
    let turns = call(
        acme,
        appends::AppendTurns {
            context: ContextRef::Id(context),
            expected_head: None,
            turns: vec![TurnSpec {
                parent: ParentWire::Head,
                type_tag: 1,
                codec: 0,
                summary: false,
                extras: ExtrasWire {
                    key: Bytes::from_static(b"step-1"),
                    labels: vec![("run_id".into(), "r-1".into())],
                    links: vec![],
                },
                payload: PayloadSpec::Bytes(payload),
            }],
        },
    );
    let Response::Appends(ctxstore_protocol::AppendsResponse::AppendedTurns(turns)) = turns else {
        panic!("{turns:?}")
    };
    let turn = turns.turns[0].turn.turn_id;
    let put = call(
        acme,
        kv::KvPut {
            context: ContextRef::Id(context),
            if_absent: false,
            entries: vec![(Bytes::from_static(b"prefs"), Bytes::from_static(b"dark"))],
        },
    );
    assert!(error_code(&put).is_none(), "{put:?}");
    // An index of A's and an entry with a vector in it (decision 0033).
    let created = call(acme, index_create("memories"));
    assert!(error_code(&created).is_none(), "{created:?}");
    let put = call(
        acme,
        put_vectors(context, b"memory/1", "acme's secret memory"),
    );
    assert!(error_code(&put).is_none(), "{put:?}");
    let stream = |acme: &mut Raw| {
        let opened = call(acme, stream_open(context));
        let Response::Streams(ctxstore_protocol::StreamsResponse::Opened(opened)) = opened else {
            panic!("{opened:?}")
        };
        let stream_id = opened.info.stream_id;
        let appended = call(
            acme,
            streams::StreamAppend {
                stream_id,
                offset: Some(0),
                bytes: Bytes::from_static(b"tok tok"),
            },
        );
        assert!(error_code(&appended).is_none(), "{appended:?}");
        stream_id
    };
    let stream_sealed = stream(acme);
    let sealed = call(
        acme,
        streams::StreamSeal {
            stream_id: stream_sealed,
        },
    );
    assert!(error_code(&sealed).is_none(), "{sealed:?}");
    let stream_open = stream(acme);
    Held {
        context,
        turn,
        hash,
        stream_open,
        stream_sealed,
    }
}

fn index_create(name: &str) -> vectors::VectorIndexCreate {
    vectors::VectorIndexCreate {
        name: name.into(),
        dims: 3,
        metric: 1,
        ef_search: 0,
    }
}

fn put_vectors(context: u64, key: &'static [u8], value: &'static str) -> vectors::KvPutVectors {
    vectors::KvPutVectors {
        context: ContextRef::Id(context),
        put_flags: 0,
        ttl_ms: 0,
        index: "memories".into(),
        dims: 3,
        entries: vec![vectors::VectorEntryWire {
            key: Bytes::from_static(key),
            value: Bytes::from_static(value.as_bytes()),
            vectors: vec![vec![1.0, 0.0, 0.0]],
        }],
    }
}

/// An answer with `ids` written as `N` where each stands whole (not inside a longer number or
/// hash): what must equal an absent id's answer.
fn said(response: &Response, ids: &[String]) -> String {
    let mut text = format!("{response:?}");
    for id in ids {
        text = replace_whole(&text, id);
    }
    text
}

fn replace_whole(text: &str, id: &str) -> String {
    let bytes = text.as_bytes();
    let stands_alone = |at: Option<&u8>| at.is_none_or(|byte| !byte.is_ascii_alphanumeric());
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find(id) {
        let at = from + found;
        let end = at + id.len();
        let before = at.checked_sub(1).and_then(|index| bytes.get(index));
        if stands_alone(before) && stands_alone(bytes.get(end)) {
            out.push_str(&text[rest..at]);
            out.push('N');
            rest = end;
        }
        from = at + 1;
    }
    out.push_str(&text[rest..]);
    out
}

/// The hostile case of one message: `mine` (A's ids) and `absent` (ids no tenant has) sent by
/// B; their answers must read the same once each side's ids are written as `N`.
struct Twin {
    mine: Request,
    absent: Request,
    ids: Vec<String>,
    absent_ids: Vec<String>,
}

/// Which of `Held`'s ids a request names.
enum F {
    Context,
    Turn,
    Hash,
    StreamOpen,
    StreamSealed,
}

/// How a message is held to isolation.
enum Case {
    /// Answered alike whoever sends it, naming no tenant's data (PING, ROLE), or the
    /// connection's own (HELLO: the token tests below).
    Untouched,
    /// The operator's only: a tenant is refused UNAUTHORIZED.
    OperatorOnly(Request),
    /// A's ids against absent ones.
    Twin(Box<Twin>),
    /// A listing or search through B: it finds nothing of A's.
    Empty(Request),
    /// TENANT_LIST: B's token is answered B's own entry only (its STATS); the operator's,
    /// every tenant.
    OwnEntry(Request),
}

/// The hostile case of `message`, with A's data in `a` and an absent twin of each id in `x`.
fn case(message: MessageType, a: &Held, x: &Held, b_context: u64) -> Case {
    use MessageType as M;
    let id = |held: &Held| ContextRef::Id(held.context);
    let hex = |hash: &BlobHash| hex(&hash.0);
    // Only the ids a request names are written as `N`: a small ContextID must not stand
    // for the count in a message ("1 of the chunks").
    let ids = |held: &Held, fields: &[F]| -> Vec<String> {
        fields
            .iter()
            .map(|field| match field {
                F::Context => held.context.to_string(),
                F::Turn => held.turn.to_string(),
                F::Hash => hex(&held.hash),
                F::StreamOpen => held.stream_open.to_string(),
                F::StreamSealed => held.stream_sealed.to_string(),
            })
            .collect()
    };
    let pair = |fields: &[F], build: &dyn Fn(&Held) -> Request| {
        Case::Twin(Box::new(Twin {
            mine: build(a),
            absent: build(x),
            ids: ids(a, fields),
            absent_ids: ids(x, fields),
        }))
    };
    match message {
        M::Hello | M::Ping | M::Role => Case::Untouched,
        M::Stats => Case::OperatorOnly(admin::Stats.into()),
        M::StatsEx => Case::OperatorOnly(admin::StatsEx.into()),
        M::Gc => Case::OperatorOnly(admin::Gc.into()),
        M::Backup => Case::OperatorOnly(
            admin::Backup {
                dir: "/tmp/nowhere-a-tenant-may-back-up".into(),
            }
            .into(),
        ),
        M::ReplicationStats => Case::OperatorOnly(admin::ReplicationStats.into()),
        M::TenantList => Case::OwnEntry(
            admin::TenantList {
                after: String::new(),
                limit: 100,
            }
            .into(),
        ),
        // The operator's only, whatever the name.
        M::TenantDelete => Case::OperatorOnly(
            admin::TenantDelete {
                name: "nobody".into(),
            }
            .into(),
        ),
        M::TenantRotateKey => Case::OperatorOnly(
            admin::TenantRotateKey {
                name: "acme".into(),
            }
            .into(),
        ),
        M::CtxCreate => pair(&[F::Turn], &|h| {
            contexts::CtxCreate {
                base_turn_id: h.turn,
            }
            .into()
        }),
        M::CtxFork => pair(&[F::Turn], &|h| {
            contexts::CtxFork { turn_id: h.turn }.into()
        }),
        M::GetHead => pair(&[F::Context], &|h| {
            contexts::GetHead { context: id(h) }.into()
        }),
        M::CtxOpen => pair(&[F::Context], &|h| {
            contexts::CtxOpen {
                base_turn_id: 0,
                get_or_create: false,
                clone_from: Some(id(h)),
                name: None,
                tags: vec![],
            }
            .into()
        }),
        M::CtxShow => pair(&[F::Context], &|h| {
            contexts::CtxShow { context: id(h) }.into()
        }),
        M::CtxTag => pair(&[F::Context], &|h| {
            contexts::CtxTag {
                context: id(h),
                expected_head: None,
                set: vec![("k".into(), "v".into())],
                remove: vec![],
            }
            .into()
        }),
        M::CtxList => Case::Empty(
            contexts::CtxList {
                tags: vec![("user".into(), "42".into())],
                name_prefix: None,
                updated_after_unix_ms: None,
                updated_before_unix_ms: None,
                cursor: None,
                limit: 100,
            }
            .into(),
        ),
        M::CtxName => pair(&[F::Context], &|h| {
            contexts::CtxName {
                context: id(h),
                name: "taken-over".into(),
            }
            .into()
        }),
        M::AppendTurn => pair(&[F::Context], &|h| {
            appends::AppendTurn {
                context: id(h),
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload: Bytes::from_static(b"injected"),
            }
            .into()
        }),
        // B's own context, A's hash: the blob is absent to B.
        M::AppendTurnByHash => pair(&[F::Hash], &|h| {
            appends::AppendTurnByHash {
                context: ContextRef::Id(b_context),
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload_hash: h.hash,
            }
            .into()
        }),
        M::AppendTurns => pair(&[F::Context], &|h| {
            appends::AppendTurns {
                context: id(h),
                expected_head: None,
                turns: vec![TurnSpec {
                    parent: ParentWire::Head,
                    type_tag: 1,
                    codec: 0,
                    summary: false,
                    extras: ExtrasWire::default(),
                    payload: PayloadSpec::Bytes(Bytes::from_static(b"injected")),
                }],
            }
            .into()
        }),
        M::GetTurn => pair(&[F::Turn], &|h| reads::GetTurn { turn_id: h.turn }.into()),
        M::GetLast => pair(&[F::Context], &|h| {
            reads::GetLast {
                context: id(h),
                limit: 10,
                read_flags: ctxstore_protocol::read_flags::WITH_PAYLOADS,
            }
            .into()
        }),
        M::GetBefore => pair(&[F::Context, F::Turn], &|h| {
            reads::GetBefore {
                context: id(h),
                before_turn_id: h.turn,
                limit: 10,
                read_flags: 0,
            }
            .into()
        }),
        M::GetRangeByDepth => pair(&[F::Context], &|h| {
            reads::GetRangeByDepth {
                context: id(h),
                from_depth: 0,
                limit: 10,
                read_flags: 0,
            }
            .into()
        }),
        M::GetChain => pair(&[F::Turn], &|h| {
            reads::GetChain {
                turn_id: h.turn,
                from_depth: 0,
                limit: 10,
                read_flags: 0,
            }
            .into()
        }),
        M::GetBlob => pair(&[F::Hash], &|h| {
            blobs::GetBlob {
                hash: h.hash,
                read_flags: 0,
            }
            .into()
        }),
        M::HasBlobs => pair(&[F::Hash], &|h| {
            blobs::HasBlobs {
                hashes: vec![h.hash],
            }
            .into()
        }),
        M::KvPut => pair(&[F::Context], &|h| {
            kv::KvPut {
                context: id(h),
                if_absent: false,
                entries: vec![(Bytes::from_static(b"prefs"), Bytes::from_static(b"light"))],
            }
            .into()
        }),
        M::KvGet => pair(&[F::Context], &|h| {
            kv::KvGet {
                context: id(h),
                key: Bytes::from_static(b"prefs"),
                read_flags: 0,
            }
            .into()
        }),
        M::KvDelete => pair(&[F::Context], &|h| {
            kv::KvDelete {
                context: id(h),
                keys: vec![Bytes::from_static(b"prefs")],
            }
            .into()
        }),
        M::KvList => pair(&[F::Context], &|h| {
            kv::KvList {
                context: id(h),
                prefix: Bytes::new(),
                after: Bytes::new(),
                limit: 10,
            }
            .into()
        }),
        M::GetTurnByKey => pair(&[F::Context], &|h| {
            reads::GetTurnByKey {
                context: id(h),
                key: Bytes::from_static(b"step-1"),
            }
            .into()
        }),
        M::TurnLog => pair(&[F::Context], &|h| {
            reads::TurnLog {
                context: id(h),
                labels: vec![],
                cursor: None,
                limit: 10,
                read_flags: 0,
            }
            .into()
        }),
        M::ReadPage => pair(&[F::Context], &|h| {
            reads::ReadPage {
                context: id(h),
                kind: PageKind::Last,
                limit: 10,
                read_flags: 0,
            }
            .into()
        }),
        M::FindTurns => Case::Empty(
            reads::FindTurns {
                key: "run_id".into(),
                value: "r-1".into(),
                before_turn_id: 0,
                limit: 10,
            }
            .into(),
        ),
        M::CtxDelete => pair(&[F::Context], &|h| {
            retention::CtxDelete { context: id(h) }.into()
        }),
        M::CtxPrune => pair(&[F::Context], &|h| {
            retention::CtxPrune {
                context: id(h),
                keep: 1,
            }
            .into()
        }),
        M::CtxTtl => pair(&[F::Context], &|h| {
            retention::CtxTtl {
                context: id(h),
                set: true,
                ttl_ms: 1,
            }
            .into()
        }),
        M::PatchTurn => pair(&[F::Turn], &|h| {
            overlays::PatchTurn {
                turn_id: h.turn,
                payload: Bytes::from_static(b"rewritten"),
            }
            .into()
        }),
        M::RedactTurn => pair(&[F::Turn], &|h| {
            overlays::RedactTurn { turn_id: h.turn }.into()
        }),
        M::PurgeBlob => pair(&[F::Hash], &|h| overlays::PurgeBlob { hash: h.hash }.into()),
        // A's payload named as B's only chunk, not sent: missing, as an absent chunk is.
        M::PutChunked => pair(&[F::Hash], &|h| {
            blobs::PutChunked {
                payload_hash: h.hash,
                base: None,
                chunks: vec![ChunkWire {
                    hash: h.hash,
                    len: 42,
                }],
                sent: vec![],
            }
            .into()
        }),
        M::KvPutEx => pair(&[F::Context], &|h| {
            kv::KvPutEx {
                context: id(h),
                put_flags: 0,
                ttl_ms: 0,
                entries: vec![(Bytes::from_static(b"prefs"), Bytes::from_static(b"x"))],
            }
            .into()
        }),
        M::KvGetEx => pair(&[F::Context], &|h| {
            kv::KvGetEx {
                context: id(h),
                key: Bytes::from_static(b"prefs"),
                read_flags: 0,
                kv_flags: 0,
            }
            .into()
        }),
        M::KvListEx => pair(&[F::Context], &|h| {
            kv::KvListEx {
                context: id(h),
                prefix: Bytes::new(),
                after: Bytes::new(),
                limit: 10,
                kv_flags: 0,
            }
            .into()
        }),
        M::KvTouch => pair(&[F::Context], &|h| {
            kv::KvTouch {
                context: id(h),
                ttl_ms: 1,
                keys: vec![Bytes::from_static(b"prefs")],
            }
            .into()
        }),
        M::KvGetMany => pair(&[F::Context], &|h| {
            kv::KvGetMany {
                context: id(h),
                read_flags: 0,
                keys: vec![Bytes::from_static(b"prefs")],
            }
            .into()
        }),
        M::StreamOpen => pair(&[F::Context], &|h| stream_open(h.context).into()),
        M::StreamAppend => pair(&[F::StreamOpen], &|h| {
            streams::StreamAppend {
                stream_id: h.stream_open,
                offset: None,
                bytes: Bytes::from_static(b"injected"),
            }
            .into()
        }),
        M::StreamSeal => pair(&[F::StreamOpen], &|h| {
            streams::StreamSeal {
                stream_id: h.stream_open,
            }
            .into()
        }),
        M::StreamAbort => pair(&[F::StreamOpen], &|h| {
            streams::StreamAbort {
                stream_id: h.stream_open,
            }
            .into()
        }),
        M::StreamList => pair(&[F::Context], &|h| {
            streams::StreamList {
                context: id(h),
                after_stream_id: 0,
                limit: 10,
            }
            .into()
        }),
        M::StreamRead => pair(&[F::StreamSealed], &|h| {
            streams::StreamRead {
                stream_id: h.stream_sealed,
                offset: 0,
                bytes_max: 1024,
                wait_ms: 0,
            }
            .into()
        }),
        M::Watch => pair(&[F::Context], &|h| {
            streams::Watch {
                target: WatchTargetWire::Context(id(h)),
                after_seq: 0,
                max_events: 100,
                wait_ms: 0,
            }
            .into()
        }),
        // B's own indexes (another tenant's of the same name is another index): creating,
        // dropping and listing them finds nothing of A's, and A's "memories" stays whole.
        M::VectorIndexCreate => Case::Empty(index_create("memories").into()),
        M::VectorIndexDrop => Case::Empty(
            vectors::VectorIndexDrop {
                name: "memories".into(),
            }
            .into(),
        ),
        M::VectorIndexList => Case::Empty(vectors::VectorIndexList {}.into()),
        M::VectorSearch => pair(&[F::Context], &|h| {
            vectors::VectorSearch {
                context: id(h),
                index: "memories".into(),
                vector: vec![1.0, 0.0, 0.0],
                k: 10,
                offset: 0,
                search_flags: 0,
                ef_search: 0,
                prefix: Bytes::new(),
                filter: Bytes::new(),
            }
            .into()
        }),
        M::KvPutVectors => pair(&[F::Context], &|h| {
            put_vectors(h.context, b"memory/1", "injected").into()
        }),
        M::AppendTurnsVectors => pair(&[F::Context], &|h| {
            vectors::AppendTurnsVectors {
                context: id(h),
                expected_head: None,
                index: "memories".into(),
                dims: 3,
                turns: vec![vectors::VectorTurnWire {
                    spec: ctxstore_protocol::TurnSpec {
                        parent: ctxstore_protocol::ParentWire::Head,
                        type_tag: 1,
                        codec: 0,
                        summary: false,
                        extras: ctxstore_protocol::ExtrasWire {
                            key: Bytes::new(),
                            labels: vec![],
                            links: vec![],
                        },
                        payload: ctxstore_protocol::PayloadSpec::Bytes(Bytes::from_static(
                            b"injected",
                        )),
                    },
                    vectors: vec![vec![1.0, 0.0, 0.0]],
                }],
            }
            .into()
        }),
        M::VectorSearchTurns => pair(&[F::Context], &|h| {
            vectors::VectorSearchTurns {
                index: "memories".into(),
                vector: vec![1.0, 0.0, 0.0],
                k: 10,
                offset: 0,
                search_flags: 0,
                ef_search: 0,
                context: id(h),
                name_prefix: String::new(),
                tags: vec![],
                labels: vec![],
                type_tag: 0,
            }
            .into()
        }),
        M::StreamFollow => pair(&[F::StreamOpen], &|h| {
            streams::StreamFollow {
                stream_id: h.stream_open,
                offset: 0,
                bytes_max: 1024,
                wait_ms: 0,
            }
            .into()
        }),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Every message of the table, sent by tenant B with tenant A's ids: each answer is the one an
/// absent id gets, a listing finds nothing, a store-wide message is refused, and A's data is
/// unchanged after all of it.
#[test]
fn tenant_b_learns_nothing_of_tenant_a_through_any_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &tenants_toml(""));
    let mut acme = connect(&server, ACME);
    let a = fill(&mut acme);
    let absent = Held {
        context: a.context + 1_000_000,
        turn: a.turn + 1_000_000,
        hash: BlobHash(*blake3::hash(b"no tenant stored this").as_bytes()),
        stream_open: a.stream_open + 1_000_000,
        stream_sealed: a.stream_sealed + 1_000_000,
    };
    let mut globex = connect(&server, GLOBEX);
    let b_context = match call(&mut globex, contexts::CtxCreate { base_turn_id: 0 }) {
        Response::Contexts(ctxstore_protocol::ContextsResponse::Context(context)) => {
            context.head.context_id
        }
        other => panic!("{other:?}"),
    };
    // The operator's token sees none of A's data either: it is TenantId 0's.
    let mut operator = connect(&server, OPERATOR);

    let mut covered = 0;
    for message in MessageType::ALL {
        match case(message, &a, &absent, b_context) {
            Case::Untouched => {}
            Case::OperatorOnly(request) => {
                let refused = globex.call(7, &request);
                assert_eq!(
                    error_code(&refused),
                    Some(ErrorCode::Unauthorized),
                    "{message:?}: {refused:?}"
                );
                // The operator's BACKUP would write a copy: not sent here.
                if message != MessageType::Backup {
                    let allowed = operator.call(7, &request);
                    match message {
                        // Let through, then refused for what they ask: a tenant never
                        // registered ("nobody": none is deleted here), a key in a server that
                        // seals nothing.
                        MessageType::TenantDelete | MessageType::TenantRotateKey => {
                            let code = error_code(&allowed);
                            assert_ne!(code, Some(ErrorCode::Unauthorized), "{allowed:?}");
                        }
                        _ => assert!(error_code(&allowed).is_none(), "{message:?}: {allowed:?}"),
                    }
                }
            }
            Case::Twin(twin) => {
                for raw in [&mut globex, &mut operator] {
                    let mine = raw.call(7, &twin.mine);
                    let absent = raw.call(7, &twin.absent);
                    assert_eq!(
                        said(&mine, &twin.ids),
                        said(&absent, &twin.absent_ids),
                        "{message:?}: A's ids answered otherwise than absent ones"
                    );
                    // Nothing of A's came back, whatever the answer.
                    let text = format!("{mine:?}");
                    assert!(!text.contains("acme's secret"), "{message:?}: {text}");
                }
            }
            Case::OwnEntry(request) => {
                let names = |answer: Response| match answer {
                    Response::Admin(ctxstore_protocol::AdminResponse::TenantsListed(page)) => {
                        assert!(page.next.is_empty(), "{page:?}");
                        let names = page.tenants.iter().map(|tenant| tenant.name.clone());
                        names.collect::<Vec<_>>()
                    }
                    other => panic!("{message:?}: {other:?}"),
                };
                assert_eq!(names(globex.call(7, &request)), ["globex"]);
                assert_eq!(
                    names(operator.call(7, &request)),
                    ["acme", "acme-readers", "globex"]
                );
            }
            Case::Empty(request) => {
                for raw in [&mut globex, &mut operator] {
                    let found = raw.call(7, &request);
                    let text = format!("{found:?}");
                    assert!(error_code(&found).is_none(), "{message:?}: {text}");
                    assert!(
                        !text.contains(&format!("context_id: {}", a.context))
                            && !text.contains(&format!("turn_id: {}", a.turn)),
                        "{message:?} found A's data: {text}"
                    );
                }
            }
        }
        covered += 1;
    }
    assert_eq!(covered, MessageType::ALL.len());

    // A's payload sent by B is stored for B, not found as a copy of A's: no dedup flag tells
    // B what A holds. (Sent again by A, it is A's own copy: deduplicated.)
    let payload = Bytes::from_static(b"{\"role\":\"user\",\"content\":\"acme's secret\"}");
    for (raw, context, deduped) in [
        (&mut globex, b_context, false),
        (&mut acme, a.context, true),
    ] {
        let appended = call(
            raw,
            appends::AppendTurn {
                context: ContextRef::Id(context),
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload: payload.clone(),
            },
        );
        let Response::Appends(ctxstore_protocol::AppendsResponse::Appended(appended)) = appended
        else {
            panic!("{appended:?}")
        };
        assert_eq!(appended.deduped, deduped);
        assert_eq!(
            appended.turn.payload_hash, a.hash,
            "the client's hash, for both"
        );
    }

    // A's data is whole after B's attempts: its head, its entry, its blob, its open stream.
    let last = call(
        &mut acme,
        reads::GetLast {
            context: ContextRef::Id(a.context),
            limit: 10,
            read_flags: ctxstore_protocol::read_flags::WITH_PAYLOADS,
        },
    );
    let text = format!("{last:?}");
    assert!(text.contains("acme's secret"), "{text}");
    assert!(
        !text.contains("injected") && !text.contains("rewritten"),
        "{text}"
    );
    let blob = call(
        &mut acme,
        blobs::GetBlob {
            hash: a.hash,
            read_flags: 0,
        },
    );
    assert!(error_code(&blob).is_none(), "{blob:?}");
    let value = call(
        &mut acme,
        kv::KvGet {
            context: ContextRef::Id(a.context),
            key: Bytes::from_static(b"prefs"),
            read_flags: 0,
        },
    );
    assert!(format!("{value:?}").contains("dark"), "{value:?}");
    // A's index and its vector, found by A's search only.
    let listed = call(&mut acme, vectors::VectorIndexList {});
    assert!(format!("{listed:?}").contains("vectors: 1"), "{listed:?}");
    let found = call(
        &mut acme,
        vectors::VectorSearch {
            context: ContextRef::Id(a.context),
            index: "memories".into(),
            vector: vec![1.0, 0.0, 0.0],
            k: 10,
            offset: 0,
            search_flags: 0,
            ef_search: 0,
            prefix: Bytes::new(),
            filter: Bytes::new(),
        },
    );
    assert!(format!("{found:?}").contains("memory/1"), "{found:?}");
    let read = call(
        &mut acme,
        streams::StreamRead {
            stream_id: a.stream_open,
            offset: 0,
            bytes_max: 1024,
            wait_ms: 0,
        },
    );
    assert!(error_code(&read).is_none(), "{read:?}");
}

/// Rights are the tenants file's: a read-only token reads its tenant's data and is refused
/// every write, UNAUTHORIZED naming the right; a token the file does not hold is refused at
/// HELLO as a wrong token is.
#[test]
fn rights_are_checked_before_the_engine_and_unknown_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &tenants_toml(""));
    let mut acme = connect(&server, ACME);
    let a = fill(&mut acme);
    let mut reader = connect(&server, READER);
    // acme-readers is a tenant of its own: acme's context is absent to it.
    let head = call(
        &mut reader,
        contexts::GetHead {
            context: ContextRef::Id(a.context),
        },
    );
    assert_eq!(error_code(&head), Some(ErrorCode::NotFound), "{head:?}");
    let created = call(&mut reader, contexts::CtxCreate { base_turn_id: 0 });
    assert_eq!(error_code(&created), Some(ErrorCode::Unauthorized));
    let Response::Error { message, .. } = created else {
        unreachable!()
    };
    assert!(message.contains("write"), "{message}");
    let list = call(
        &mut reader,
        contexts::CtxList {
            tags: vec![],
            name_prefix: None,
            updated_after_unix_ms: None,
            updated_before_unix_ms: None,
            cursor: None,
            limit: 10,
        },
    );
    assert!(error_code(&list).is_none(), "{list:?}");

    for token in ["not-a-token-of-this-server-at-all", ""] {
        let mut raw = Raw::connect(server.socket_addr());
        let hello = raw.hello(token.as_bytes());
        assert_eq!(
            error_code(&hello),
            Some(ErrorCode::Unauthorized),
            "{hello:?}"
        );
    }
    // PING and ROLE answer every tenant.
    let ping = call(&mut reader, AdminRequest::Ping(admin::Ping { nonce: 5 }));
    assert!(error_code(&ping).is_none(), "{ping:?}");
}

/// A malformed tenants file refuses the start, naming its line; one without the operator's
/// token is refused too (any connection would be the operator).
#[test]
fn a_malformed_tenants_file_refuses_the_start_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(
        &file,
        tenants_toml("[[tenant]]\nname = \"acme\"\ntokens = []\n"),
    )
    .unwrap();
    let launch = |token: Option<&str>| {
        ServerLaunch::new(env!("CARGO_BIN_EXE_ctxstore-server"))
            .token(token)
            .flags(&["--tenants-file", file.to_str().unwrap()])
            .keep_log()
            .ready_timeout(Duration::from_secs(20))
            .try_start()
    };
    let Err(refused) = launch(Some(OPERATOR)) else {
        panic!("a malformed file refuses the start")
    };
    let text = refused.to_string();
    assert!(
        text.contains("tenants file") && text.contains("line"),
        "{text}"
    );

    std::fs::write(&file, tenants_toml("")).unwrap();
    let Err(refused) = launch(None) else {
        panic!("tenants without an operator token")
    };
    assert!(refused.to_string().contains("--token-file"), "{refused}");
}

/// SIGHUP reads the file again: a new tenant's token works from then on, a removed one is
/// refused at its next HELLO, and a malformed file keeps the old one in force (the log says
/// why).
#[test]
fn sighup_reloads_the_tenants_file_and_a_malformed_one_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &tenants_toml(""));
    let file = dir.path().join("tenants.toml");
    let initech = "initech-token-0123456789abcd";
    let hello = |token: &str| {
        let mut raw = Raw::connect(server.socket_addr());
        error_code(&raw.hello(token.as_bytes()))
    };
    assert_eq!(hello(initech), Some(ErrorCode::Unauthorized));

    let added = format!(
        "[[tenant]]\nname = \"initech\"\ntokens = [\"{initech}\"]\nrights = [\"read\", \
         \"write\"]\n"
    );
    std::fs::write(
        &file,
        tenants_toml(&added).replace(GLOBEX, "globex-rotated-0123456789"),
    )
    .unwrap();
    server.signal("HUP");
    wait_for(
        || hello(initech).is_none(),
        "the new tenant's token after SIGHUP",
    );
    assert_eq!(
        hello(GLOBEX),
        Some(ErrorCode::Unauthorized),
        "a removed token"
    );
    let mut initech_raw = connect(&server, initech);
    let created = call(&mut initech_raw, contexts::CtxCreate { base_turn_id: 0 });
    assert!(error_code(&created).is_none(), "{created:?}");

    std::fs::write(&file, "[[tenant]]\nname = \"Bad Name\"\n").unwrap();
    server.signal("HUP");
    wait_for(
        || server.log().contains("tenants file") && server.log().contains("kept"),
        "the log saying the malformed file was refused",
    );
    assert!(hello(initech).is_none(), "the old file stays in force");
}

fn wait_for(mut done: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A standby takes its tenants from its primary's log (it registers none itself): once the
/// primary's records arrive, each tenant's token reads that tenant's data there, and another
/// tenant's ids are as absent on the standby as on the primary.
#[test]
fn a_standby_serves_each_tenant_its_own_data_from_the_primarys_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(&file, tenants_toml("")).unwrap();
    let url = format!("file://{}", dir.path().join("replica").display());
    let launch = |data: &str, role: &[&str]| {
        let mut flags = vec!["--tenants-file", file.to_str().unwrap()];
        flags.extend_from_slice(role);
        flags.extend_from_slice(&["--replicate-interval", "100ms"]);
        ServerLaunch::new(env!("CARGO_BIN_EXE_ctxstore-server"))
            .data(&dir.path().join(data))
            .token(Some(OPERATOR))
            .flags(&flags)
            .keep_log()
            .start()
    };
    let primary = launch("primary", &["--replicate-to", &url]);
    let mut acme = connect(&primary, ACME);
    let a = fill(&mut acme);
    let standby = launch("standby", &["--follow", &url]);

    // Acme's context arrives on the standby, read through acme's token there.
    let head = contexts::GetHead {
        context: ContextRef::Id(a.context),
    };
    let mut on_standby = None;
    wait_for(
        || {
            let mut raw = Raw::connect(standby.socket_addr());
            if error_code(&raw.hello(ACME.as_bytes())).is_some() {
                return false;
            }
            let found = error_code(&raw.call(7, &head.clone().into())).is_none();
            if found {
                on_standby = Some(raw);
            }
            found
        },
        "acme's context on the standby",
    );
    let mut acme_standby = on_standby.unwrap();
    let blob = call(
        &mut acme_standby,
        blobs::GetBlob {
            hash: a.hash,
            read_flags: 0,
        },
    );
    assert!(format!("{blob:?}").contains("acme's secret"), "{blob:?}");

    // Globex on the standby: acme's context and blob are absent, said as absent ones are.
    let mut globex = connect(&standby, GLOBEX);
    let absent = contexts::GetHead {
        context: ContextRef::Id(a.context + 1_000_000),
    };
    assert_eq!(
        said(&call(&mut globex, head), &[a.context.to_string()]),
        said(
            &call(&mut globex, absent),
            &[(a.context + 1_000_000).to_string()]
        )
    );
    let held = call(
        &mut globex,
        blobs::HasBlobs {
            hashes: vec![a.hash],
        },
    );
    assert!(format!("{held:?}").contains("[false]"), "{held:?}");
}

/// A tenants file whose tenants have quotas (decision 0032 §3).
fn quota_toml(acme_contexts: u64) -> String {
    format!(
        "[[tenant]]\nname = \"acme\"\ntokens = [\"{ACME}\"]\nrights = [\"read\", \"write\", \
         \"admin\"]\nquota_contexts = {acme_contexts}\nquota_streams = 1\nquota_appends_per_s \
         = 50\n\n[[tenant]]\nname = \"globex\"\ntokens = [\"{GLOBEX}\"]\nrights = [\"read\", \
         \"write\"]\nquota_connections = 2\nquota_bytes = 600\n"
    )
}

fn turns(count: usize) -> Vec<TurnSpec> {
    let turn = |i: usize| TurnSpec {
        parent: ParentWire::Head,
        type_tag: 1,
        codec: 0,
        summary: false,
        extras: ExtrasWire::default(),
        payload: PayloadSpec::Bytes(Bytes::from(format!("turn {i}"))),
    };
    (0..count).map(turn).collect()
}

/// QUOTA_EXCEEDED's `detail` (the limit) and message, or a panic naming what came instead.
fn refused_at(response: &Response, quota: &str) -> u64 {
    let Response::Error {
        code: ErrorCode::QuotaExceeded,
        detail,
        message,
    } = response
    else {
        panic!("expected QUOTA_EXCEEDED for {quota}, got {response:?}");
    };
    assert!(message.contains(quota), "{message}");
    *detail
}

/// Quotas at their edge through the protocol: creates racing from six connections pass
/// exactly up to `quota_contexts`; a batch over `quota_appends_per_s` fails whole; a second
/// open stream meets `quota_streams`; a third connection meets `quota_connections` (OVERLOADED
/// for a version-4 client) and a closed one gives its place back; the operator is held to
/// none of it; a SIGHUP raising a quota applies to the connections already open.
#[test]
fn quotas_hold_at_their_edge_from_several_connections_and_a_reload_moves_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &quota_toml(3));

    let created: Vec<Response> = std::thread::scope(|scope| {
        let creators: Vec<_> = (0..6)
            .map(|_| {
                let server = &server;
                scope.spawn(move || {
                    let mut acme = connect(server, ACME);
                    call(&mut acme, contexts::CtxCreate { base_turn_id: 0 })
                })
            })
            .collect();
        creators.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let passed: Vec<u64> = created
        .iter()
        .filter_map(|response| match response {
            Response::Contexts(ctxstore_protocol::ContextsResponse::Context(created)) => {
                Some(created.head.context_id)
            }
            _ => None,
        })
        .collect();
    assert_eq!(passed.len(), 3, "{created:?}");
    for response in created.iter().filter(|r| error_code(r).is_some()) {
        assert_eq!(refused_at(response, "quota_contexts: 3 of 3"), 3);
    }

    // A batch over a second's worth of appends fails whole; a smaller one passes.
    let mut acme = connect(&server, ACME);
    let context = passed[0];
    let append = |raw: &mut Raw, count| {
        let request = appends::AppendTurns {
            context: ContextRef::Id(context),
            expected_head: None,
            turns: turns(count),
        };
        call(raw, request)
    };
    refused_at(&append(&mut acme, 60), "quota_appends_per_s");
    let head = call(
        &mut acme,
        contexts::GetHead {
            context: ContextRef::Id(context),
        },
    );
    let Response::Contexts(ctxstore_protocol::ContextsResponse::Context(head)) = head else {
        panic!("{head:?}")
    };
    assert_eq!(
        head.head.head_depth, 0,
        "nothing of the refused batch was written"
    );
    let appended = append(&mut acme, 10);
    assert!(error_code(&appended).is_none(), "{appended:?}");

    // One open stream; the second meets the quota.
    let opened = call(&mut acme, stream_open(context));
    assert!(error_code(&opened).is_none(), "{opened:?}");
    refused_at(&call(&mut acme, stream_open(passed[1])), "quota_streams");

    // Two connections of globex; the third is refused, as OVERLOADED below version 5.
    let mut first = connect(&server, GLOBEX);
    // globex's 600 bytes hold one small record (a header and a padded body), not a second.
    let created = call(&mut first, contexts::CtxCreate { base_turn_id: 0 });
    let Response::Contexts(ctxstore_protocol::ContextsResponse::Context(created)) = created else {
        panic!("{created:?}")
    };
    let globex_append = |raw: &mut Raw, payload: &[u8]| {
        let request = appends::AppendTurns {
            context: ContextRef::Id(created.head.context_id),
            expected_head: None,
            turns: vec![TurnSpec {
                payload: PayloadSpec::Bytes(Bytes::copy_from_slice(payload)),
                ..turns(1).remove(0)
            }],
        };
        call(raw, request)
    };
    let stored = globex_append(&mut first, b"globex's first payload");
    assert!(error_code(&stored).is_none(), "{stored:?}");
    // 600 bytes no compression shrinks: with the first record's, past the quota.
    let mut incompressible = [0u8; 600];
    blake3::Hasher::new()
        .update(b"globex")
        .finalize_xof()
        .fill(&mut incompressible);
    refused_at(&globex_append(&mut first, &incompressible), "quota_bytes");
    let again = globex_append(&mut first, b"globex's first payload");
    assert!(
        error_code(&again).is_none(),
        "a stored payload adds no bytes: {again:?}"
    );
    let _second = connect(&server, GLOBEX);
    let hello = Raw::connect(server.socket_addr()).hello(GLOBEX.as_bytes());
    assert_eq!(refused_at(&hello, "quota_connections"), 2);
    let old = Raw::connect(server.socket_addr()).hello_versions(GLOBEX.as_bytes(), 1, 4);
    assert_eq!(error_code(&old), Some(ErrorCode::Overloaded), "{old:?}");
    drop(first);
    wait_for(
        || error_code(&Raw::connect(server.socket_addr()).hello(GLOBEX.as_bytes())).is_none(),
        "a closed connection's place",
    );

    // The operator is held to no quota.
    let mut operator = connect(&server, OPERATOR);
    for _ in 0..5 {
        let created = call(&mut operator, contexts::CtxCreate { base_turn_id: 0 });
        assert!(error_code(&created).is_none(), "{created:?}");
    }

    // A reload raises acme's quota: the connection already open creates one more.
    refused_at(
        &call(&mut acme, contexts::CtxCreate { base_turn_id: 0 }),
        "quota_contexts",
    );
    std::fs::write(dir.path().join("tenants.toml"), quota_toml(4)).unwrap();
    server.signal("HUP");
    wait_for(
        || {
            let created = call(&mut acme, contexts::CtxCreate { base_turn_id: 0 });
            error_code(&created).is_none()
        },
        "the raised quota after SIGHUP",
    );
    refused_at(
        &call(&mut acme, contexts::CtxCreate { base_turn_id: 0 }),
        "quota_contexts: 4 of 4",
    );

    // TENANT_LIST (the operator's): one page a tenant, in name order, usage and limits.
    let page = |operator: &mut Raw, after: &str| {
        let list = admin::TenantList {
            after: after.into(),
            limit: 1,
        };
        match call(operator, list) {
            Response::Admin(ctxstore_protocol::AdminResponse::TenantsListed(listed)) => listed,
            other => panic!("{other:?}"),
        }
    };
    let first_page = page(&mut operator, "");
    assert_eq!(first_page.next, "acme");
    let listed_acme = &first_page.tenants[0];
    assert_eq!(
        (listed_acme.name.as_str(), listed_acme.tenant_id),
        ("acme", 1)
    );
    let in_file_and_registered = admin::tenant_flags::IN_FILE | admin::tenant_flags::REGISTERED;
    assert_eq!(listed_acme.flags, in_file_and_registered);
    assert_eq!(listed_acme.rights, admin::tenant_rights::KNOWN);
    assert_eq!((listed_acme.contexts, listed_acme.streams_open), (4, 1));
    assert_eq!(listed_acme.quotas.contexts, 4);
    assert_eq!(listed_acme.quotas.appends_per_s, 50);
    assert_eq!(
        (listed_acme.quotas.streams, listed_acme.quotas.bytes),
        (1, 0)
    );
    assert!(listed_acme.refusals >= 6, "{listed_acme:?}");
    assert!(listed_acme.stored_bytes > 0);
    let second_page = page(&mut operator, "acme");
    assert_eq!(second_page.next, "");
    let listed_globex = &second_page.tenants[0];
    assert_eq!(listed_globex.name, "globex");
    assert_eq!(listed_globex.quotas.bytes, 600);
    assert_eq!(listed_globex.quotas.connections, 2);
    assert!(listed_globex.stored_bytes > 0 && listed_globex.stored_bytes <= 600);
    assert!(listed_globex.refusals >= 3, "{listed_globex:?}");
    assert!(page(&mut operator, "globex").tenants.is_empty());
    // A tenant's own TENANT_LIST is its STATS: the same entry, and no other.
    let own = page(&mut acme, "");
    assert_eq!(own.next, "");
    assert_eq!(own.tenants.len(), 1, "{own:?}");
    let mut seen_by_operator = first_page.tenants[0].clone();
    seen_by_operator.connections = own.tenants[0].connections;
    seen_by_operator.refusals = own.tenants[0].refusals;
    assert_eq!(own.tenants[0], seen_by_operator);
    assert!(page(&mut acme, "acme").tenants.is_empty());
}
