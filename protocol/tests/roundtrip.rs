//! Property tests of the codec: every message round-trips byte-exactly; arbitrary bytes never
//! panic the decoder, and whatever decodes re-encodes to the same bytes (one encoding per value).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use ctxstore_protocol::codec::encode_request_chunks;
use ctxstore_protocol::*;
use ctxstore_protocol::{admin, appends, blobs, contexts, kv, overlays, reads, retention};
use proptest::prelude::*;

fn hash() -> impl Strategy<Value = BlobHash> {
    any::<[u8; 32]>().prop_map(BlobHash)
}

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _./é-]{0,40}"
}

fn context() -> impl Strategy<Value = ContextRef> {
    prop_oneof![
        any::<u64>().prop_map(ContextRef::Id),
        "[a-z0-9:/é-]{1,40}".prop_map(ContextRef::Name),
    ]
}

fn tags(max: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((name(), name()), 0..max)
}

fn optional_name() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[a-z0-9 é]{1,30}")
}

fn extras() -> impl Strategy<Value = ExtrasWire> {
    (
        bytes(20),
        proptest::collection::vec(("[a-z_]{0,10}", name()), 0..4),
        proptest::collection::vec(any::<u64>(), 0..4),
    )
        .prop_map(|(key, labels, links)| ExtrasWire { key, labels, links })
}

fn turn_spec() -> impl Strategy<Value = TurnSpec> {
    (
        prop_oneof![
            Just(ParentWire::Head),
            Just(ParentWire::Root),
            (1..u64::MAX).prop_map(ParentWire::Turn),
        ],
        any::<u64>(),
        any::<u32>(),
        any::<bool>(),
        extras(),
        prop_oneof![
            bytes(3000).prop_map(PayloadSpec::Bytes),
            hash().prop_map(PayloadSpec::Hash),
        ],
    )
        .prop_map(
            |(parent, type_tag, codec, summary, extras, payload)| TurnSpec {
                parent,
                type_tag,
                codec,
                summary,
                extras,
                payload,
            },
        )
}

fn log_cursor() -> impl Strategy<Value = Option<LogCursorWire>> {
    proptest::option::of(
        (any::<u32>(), any::<u64>()).prop_map(|(phase, next)| LogCursorWire { phase, next }),
    )
}

fn read_flags() -> impl Strategy<Value = u32> {
    0..=read_flags::KNOWN
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (1..4u16, 0..3u16, bytes(64), name()).prop_map(|(min, extra, token, client_name)| {
            Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: min,
                max_version: min + extra,
                token,
                client_name,
            }))
        }),
        any::<u64>().prop_map(|nonce| Request::Admin(AdminRequest::Ping(admin::Ping { nonce }))),
        any::<u64>().prop_map(|base_turn_id| Request::Contexts(ContextsRequest::CtxCreate(
            contexts::CtxCreate { base_turn_id }
        ))),
        any::<u64>().prop_map(|turn_id| Request::Contexts(ContextsRequest::CtxFork(
            contexts::CtxFork { turn_id }
        ))),
        context().prop_map(|context| Request::Contexts(ContextsRequest::GetHead(
            contexts::GetHead { context }
        ))),
        (
            context(),
            any::<Option<u64>>(),
            any::<u64>(),
            any::<u32>(),
            bytes(5000)
        )
            .prop_map(|(context, expected_head, type_tag, codec, payload)| {
                Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
                    context,
                    expected_head,
                    type_tag,
                    codec,
                    payload,
                }))
            }),
        (
            context(),
            any::<Option<u64>>(),
            any::<u64>(),
            any::<u32>(),
            hash()
        )
            .prop_map(|(context, expected_head, type_tag, codec, payload_hash)| {
                Request::Appends(AppendsRequest::AppendTurnByHash(
                    appends::AppendTurnByHash {
                        context,
                        expected_head,
                        type_tag,
                        codec,
                        payload_hash,
                    },
                ))
            }),
        any::<u64>()
            .prop_map(|turn_id| Request::Reads(ReadsRequest::GetTurn(reads::GetTurn { turn_id }))),
        (context(), any::<u32>(), read_flags()).prop_map(|(context, limit, read_flags)| {
            Request::Reads(ReadsRequest::GetLast(reads::GetLast {
                context,
                limit,
                read_flags,
            }))
        }),
        (context(), any::<u64>(), any::<u32>(), read_flags()).prop_map(
            |(context, before_turn_id, limit, read_flags)| Request::Reads(ReadsRequest::GetBefore(
                reads::GetBefore {
                    context,
                    before_turn_id,
                    limit,
                    read_flags
                }
            ))
        ),
        (context(), any::<u32>(), any::<u32>(), read_flags()).prop_map(
            |(context, from_depth, limit, read_flags)| Request::Reads(
                ReadsRequest::GetRangeByDepth(reads::GetRangeByDepth {
                    context,
                    from_depth,
                    limit,
                    read_flags
                })
            )
        ),
        (any::<u64>(), any::<u32>(), any::<u32>(), read_flags()).prop_map(
            |(turn_id, from_depth, limit, read_flags)| Request::Reads(ReadsRequest::GetChain(
                reads::GetChain {
                    turn_id,
                    from_depth,
                    limit,
                    read_flags
                }
            ))
        ),
        (hash(), prop_oneof![Just(0), Just(read_flags::ACCEPT_ZSTD)]).prop_map(
            |(hash, read_flags)| Request::Blobs(BlobsRequest::GetBlob(blobs::GetBlob {
                hash,
                read_flags
            }))
        ),
        proptest::collection::vec(hash(), 0..20)
            .prop_map(|hashes| Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes }))),
        Just(Request::Admin(AdminRequest::Stats(admin::Stats))),
        (
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(context()),
            optional_name(),
            tags(5)
        )
            .prop_map(|(base_turn_id, get_or_create, clone_from, name, tags)| {
                Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
                    base_turn_id,
                    get_or_create,
                    clone_from,
                    name,
                    tags,
                }))
            }),
        context().prop_map(|context| Request::Contexts(ContextsRequest::CtxShow(
            contexts::CtxShow { context }
        ))),
        (
            context(),
            any::<Option<u64>>(),
            tags(4),
            proptest::collection::vec(name(), 0..4)
        )
            .prop_map(|(context, expected_head, set, remove)| Request::Contexts(
                ContextsRequest::CtxTag(contexts::CtxTag {
                    context,
                    expected_head,
                    set,
                    remove,
                })
            )),
        (
            tags(3),
            optional_name(),
            proptest::option::of(1..u64::MAX),
            proptest::option::of(1..u64::MAX),
            prop_oneof![
                Just(None),
                any::<u64>().prop_map(|id| Some(ListCursorWire::Id(id))),
                "[a-z]{1,20}".prop_map(|name| Some(ListCursorWire::Name(name))),
            ],
            any::<u32>()
        )
            .prop_map(
                |(
                    tags,
                    name_prefix,
                    updated_after_unix_ms,
                    updated_before_unix_ms,
                    cursor,
                    limit,
                )| {
                    Request::Contexts(ContextsRequest::CtxList(contexts::CtxList {
                        tags,
                        name_prefix,
                        updated_after_unix_ms,
                        updated_before_unix_ms,
                        cursor,
                        limit,
                    }))
                }
            ),
        (context(), name()).prop_map(|(context, name)| Request::Contexts(
            ContextsRequest::CtxName(contexts::CtxName { context, name })
        )),
        (
            context(),
            any::<bool>(),
            proptest::collection::vec((bytes(40), bytes(3000)), 0..4)
        )
            .prop_map(
                |(context, if_absent, entries)| Request::Kv(KvRequest::KvPut(kv::KvPut {
                    context,
                    if_absent,
                    entries,
                }))
            ),
        (
            context(),
            bytes(40),
            prop_oneof![Just(0), Just(read_flags::ACCEPT_ZSTD)]
        )
            .prop_map(|(context, key, read_flags)| Request::Kv(KvRequest::KvGet(
                kv::KvGet {
                    context,
                    key,
                    read_flags,
                }
            ))),
        (context(), proptest::collection::vec(bytes(40), 0..5)).prop_map(|(context, keys)| {
            Request::Kv(KvRequest::KvDelete(kv::KvDelete { context, keys }))
        }),
        (context(), bytes(20), bytes(20), any::<u32>()).prop_map(
            |(context, prefix, after, limit)| Request::Kv(KvRequest::KvList(kv::KvList {
                context,
                prefix,
                after,
                limit,
            }))
        ),
        (
            context(),
            0..=kv_put_flags::KNOWN,
            any::<u64>(),
            proptest::collection::vec((bytes(40), bytes(3000)), 0..4)
        )
            .prop_map(|(context, put_flags, ttl_ms, entries)| Request::Kv(
                KvRequest::KvPutEx(kv::KvPutEx {
                    context,
                    put_flags,
                    ttl_ms,
                    entries,
                })
            )),
        (
            context(),
            bytes(40),
            prop_oneof![Just(0), Just(read_flags::ACCEPT_ZSTD)],
            0..=kv_read_flags::KNOWN
        )
            .prop_map(|(context, key, read_flags, kv_flags)| Request::Kv(
                KvRequest::KvGetEx(kv::KvGetEx {
                    context,
                    key,
                    read_flags,
                    kv_flags,
                })
            )),
        (
            context(),
            bytes(20),
            bytes(20),
            any::<u32>(),
            0..=kv_read_flags::KNOWN
        )
            .prop_map(|(context, prefix, after, limit, kv_flags)| Request::Kv(
                KvRequest::KvListEx(kv::KvListEx {
                    context,
                    prefix,
                    after,
                    limit,
                    kv_flags,
                })
            )),
        (
            context(),
            any::<u64>(),
            proptest::collection::vec(bytes(40), 0..5)
        )
            .prop_map(|(context, ttl_ms, keys)| Request::Kv(KvRequest::KvTouch(
                kv::KvTouch {
                    context,
                    ttl_ms,
                    keys
                }
            ))),
        (
            context(),
            prop_oneof![Just(0), Just(read_flags::ACCEPT_ZSTD)],
            proptest::collection::vec(bytes(40), 0..5)
        )
            .prop_map(
                |(context, read_flags, keys)| Request::Kv(KvRequest::KvGetMany(kv::KvGetMany {
                    context,
                    read_flags,
                    keys
                }))
            ),
        (
            context(),
            any::<Option<u64>>(),
            proptest::collection::vec(turn_spec(), 1..4)
        )
            .prop_map(|(context, expected_head, turns)| Request::Appends(
                AppendsRequest::AppendTurns(appends::AppendTurns {
                    context,
                    expected_head,
                    turns,
                })
            )),
        (context(), bytes(64)).prop_map(|(context, key)| Request::Reads(
            ReadsRequest::GetTurnByKey(reads::GetTurnByKey { context, key })
        )),
        (
            context(),
            proptest::collection::vec(("[a-z]{0,8}", name()), 0..3),
            log_cursor(),
            any::<u32>(),
            read_flags()
        )
            .prop_map(|(context, labels, cursor, limit, read_flags)| {
                Request::Reads(ReadsRequest::TurnLog(reads::TurnLog {
                    context,
                    labels,
                    cursor,
                    limit,
                    read_flags,
                }))
            }),
        ("[a-z_.]{0,12}", name(), any::<u64>(), any::<u32>()).prop_map(
            |(key, value, before_turn_id, limit)| Request::Reads(ReadsRequest::FindTurns(
                reads::FindTurns {
                    key,
                    value,
                    before_turn_id,
                    limit,
                }
            ))
        ),
        context().prop_map(|context| Request::Retention(RetentionRequest::CtxDelete(
            retention::CtxDelete { context }
        ))),
        "[a-z/]{1,40}".prop_map(|dir| Request::Admin(AdminRequest::Backup(admin::Backup { dir }))),
        Just(Request::Admin(AdminRequest::Gc(admin::Gc))),
        Just(Request::Admin(AdminRequest::StatsEx(admin::StatsEx))),
        Just(Request::Admin(AdminRequest::ReplicationStats(
            admin::ReplicationStats
        ))),
        Just(Request::Admin(AdminRequest::Role(admin::Role))),
        ("[a-z0-9_-]{0,64}", 1u32..=admin::TENANT_LIST_LIMIT).prop_map(|(after, limit)| {
            Request::Admin(AdminRequest::TenantList(admin::TenantList { after, limit }))
        }),
        "[a-z0-9_-]{1,64}".prop_map(|name| {
            Request::Admin(AdminRequest::TenantDelete(admin::TenantDelete { name }))
        }),
        "[a-z0-9_-]{1,64}".prop_map(|name| {
            Request::Admin(AdminRequest::TenantRotateKey(admin::TenantRotateKey {
                name,
            }))
        }),
        (context(), any::<u32>()).prop_map(|(context, keep)| Request::Retention(
            RetentionRequest::CtxPrune(retention::CtxPrune { context, keep })
        )),
        (context(), any::<bool>(), any::<u64>()).prop_map(|(context, set, ttl_ms)| {
            Request::Retention(RetentionRequest::CtxTtl(retention::CtxTtl {
                context,
                set,
                ttl_ms: if set { ttl_ms } else { 0 },
            }))
        }),
        (
            context(),
            prop_oneof![
                Just(PageKind::Last),
                any::<u64>().prop_map(|before_turn_id| PageKind::Before { before_turn_id }),
                any::<u32>().prop_map(|from_depth| PageKind::Range { from_depth }),
                Just(PageKind::Window),
            ],
            any::<u32>(),
            read_flags()
        )
            .prop_map(|(context, kind, limit, read_flags)| Request::Reads(
                ReadsRequest::ReadPage(reads::ReadPage {
                    context,
                    kind,
                    limit,
                    read_flags,
                })
            )),
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(
            |(turn_id, payload)| Request::Overlays(OverlaysRequest::PatchTurn(
                overlays::PatchTurn {
                    turn_id,
                    payload: Bytes::from(payload)
                }
            ))
        ),
        any::<u64>().prop_map(|turn_id| Request::Overlays(OverlaysRequest::RedactTurn(
            overlays::RedactTurn { turn_id }
        ))),
        hash().prop_map(|hash| Request::Overlays(OverlaysRequest::PurgeBlob(
            overlays::PurgeBlob { hash }
        ))),
        put_chunked(),
    ]
}

/// PUT_CHUNKED: 1..8 chunks (some of 2 KiB or more, sent by reference), any subset sent.
fn put_chunked() -> impl Strategy<Value = Request> {
    (
        hash(),
        proptest::collection::vec((hash(), 1..3000usize, any::<bool>(), any::<u8>()), 1..8),
        proptest::option::of((hash(), 1..100u32)),
    )
        .prop_map(|(payload_hash, entries, base)| {
            let mut chunks = Vec::new();
            let mut sent = Vec::new();
            for (index, (hash, len, send, fill)) in entries.into_iter().enumerate() {
                chunks.push(ChunkWire {
                    hash,
                    len: len as u32,
                });
                if send {
                    sent.push(SentChunkWire {
                        index: index as u32,
                        bytes: Bytes::from(vec![fill; len]),
                    });
                }
            }
            Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
                payload_hash,
                // A base names a stored blob: never the all-zero hash, which means none.
                base: base.map(|(hash, kept)| ChunkBaseWire {
                    hash: BlobHash({
                        let mut bytes = hash.0;
                        bytes[0] |= 1;
                        bytes
                    }),
                    kept,
                }),
                chunks,
                sent,
            }))
        })
}

/// A read that returns turns, in an overlay view (frame flag OVERLAYS).
fn overlay_request() -> impl Strategy<Value = Request> {
    (
        request().prop_filter_map("a read returning turns", |request| match request {
            Request::Reads(read) if read.message_type().takes_overlays() => Some(read),
            _ => None,
        }),
        any::<u64>(),
    )
        .prop_map(|(read, as_of)| Request::AsOf { as_of, read })
}

/// A write that says when it is acknowledged (frame flag ACK_AFTER, version 4).
fn ack_after_request() -> impl Strategy<Value = Request> {
    (
        request().prop_filter("a write that takes ACK_AFTER", |request| {
            request.message_type().takes_ack_after()
        }),
        proptest::sample::select(AckAfter::ALL.to_vec()),
    )
        .prop_map(|(request, after)| Request::AckAfter {
            request: Box::new(request),
            after,
        })
}

/// TENANT_LIST's answer: up to 5 tenants, any figures and known bits, names of a-z0-9_-.
fn tenants_listed() -> impl Strategy<Value = Response> {
    let tenant = (
        (any::<u32>(), 0u8..=7, 0u8..=7, "[a-z0-9_-]{1,64}"),
        any::<[u64; 10]>(),
    )
        .prop_map(|((tenant_id, flags, rights, name), v)| admin::TenantWire {
            tenant_id,
            flags,
            rights,
            name,
            contexts: v[0],
            streams_open: v[1],
            stored_bytes: v[2],
            connections: v[3],
            quotas: admin::QuotasWire {
                bytes: v[4],
                contexts: v[5],
                appends_per_s: v[6],
                connections: v[7],
                streams: v[8],
            },
            refusals: v[9],
        });
    (proptest::collection::vec(tenant, 0..5), "[a-z0-9_-]{0,64}").prop_map(|(tenants, next)| {
        Response::Admin(AdminResponse::TenantsListed(admin::TenantsListed {
            tenants,
            next,
        }))
    })
}

/// ROLE's answer: any role, any figures, texts up to 80 characters.
fn role_answer() -> impl Strategy<Value = Response> {
    (
        (
            0usize..7,
            any::<bool>(),
            proptest::sample::select(AckAfter::ALL.to_vec()),
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<[u64; 7]>(),
            any::<[u32; 2]>(),
        ),
        ("[a-z0-9:.\\[\\]]{0,60}", "\\PC{0,80}"),
    )
        .prop_map(
            |((role, accepts_writes, ack_after), (epoch, lease_ms, v, p), (primary, holder))| {
                Response::Admin(AdminResponse::RoleAnswer(Box::new(admin::RoleAnswer {
                    role: admin::ServerRole::ALL[role],
                    accepts_writes,
                    ack_after,
                    epoch,
                    lease_ms,
                    lease_age_ms: v[0],
                    ack_open_ms: v[1],
                    failovers: v[2],
                    last_failover_ms: v[3],
                    remote_waiting: v[4],
                    remote_acks_total: v[5],
                    remote_unconfirmed_total: v[6],
                    remote_ack_us_p50: p[0],
                    remote_ack_us_p99: p[1],
                    primary,
                    holder,
                })))
            },
        )
}

/// An answer to such a read, with one overlay state per turn.
fn overlay_response() -> impl Strategy<Value = Response> {
    response()
        .prop_filter_map("an answer carrying turns", |response| match response {
            Response::Reads(response) if response.message_type().takes_overlays() => Some(response),
            _ => None,
        })
        .prop_flat_map(|response| {
            let count = response.turn_count();
            (
                Just(response),
                proptest::collection::vec((any::<u64>(), any::<bool>()), count..=count),
            )
        })
        .prop_map(|(response, states)| Response::Overlaid {
            response: Box::new(response),
            overlays: states
                .into_iter()
                .map(|(overlay_seq, redacted)| OverlayWire {
                    overlay_seq,
                    redacted,
                })
                .collect(),
        })
}

fn entries_v2() -> impl Strategy<Value = Vec<TurnEntryV2>> {
    proptest::collection::vec((turn(), extras(), payload()), 0..4).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(turn, extras, payload)| TurnEntryV2 {
                turn,
                extras,
                payload,
            })
            .collect()
    })
}

fn context_info() -> impl Strategy<Value = ContextInfoWire> {
    (
        any::<(u64, u64, u32)>(),
        any::<(u64, u64)>(),
        optional_name(),
        tags(4),
    )
        .prop_map(
            |((context_id, head_turn_id, head_depth), (created, updated), name, tags)| {
                ContextInfoWire {
                    head: ContextHeadWire {
                        context_id,
                        head_turn_id,
                        head_depth,
                    },
                    created_at_unix_ms: created,
                    updated_at_unix_ms: updated,
                    name,
                    tags,
                }
            },
        )
}

fn turn() -> impl Strategy<Value = TurnWire> {
    (any::<[u64; 5]>(), any::<[u32; 4]>(), hash()).prop_map(|(words, halves, payload_hash)| {
        TurnWire {
            turn_id: words[0],
            parent_turn_id: words[1],
            context_id: words[2],
            depth: halves[0],
            codec: halves[1],
            type_tag: words[3],
            payload_hash,
            payload_len: halves[2],
            flags: halves[3],
            created_at_unix_ms: words[4],
        }
    })
}

fn payload() -> impl Strategy<Value = PayloadWire> {
    prop_oneof![
        Just(PayloadWire::absent()),
        bytes(6000).prop_map(|data| PayloadWire {
            encoding: PayloadEncoding::Raw,
            raw_len: data.len() as u32,
            data
        }),
        (any::<u32>(), bytes(3000)).prop_map(|(raw_len, data)| PayloadWire {
            encoding: PayloadEncoding::Zstd,
            raw_len,
            data
        }),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

fn response() -> impl Strategy<Value = Response> {
    let context_types = proptest::sample::select(vec![
        MessageType::CtxCreate,
        MessageType::CtxFork,
        MessageType::GetHead,
    ]);
    let append_types =
        proptest::sample::select(vec![MessageType::AppendTurn, MessageType::AppendTurnByHash]);
    let page_types = proptest::sample::select(vec![
        MessageType::GetLast,
        MessageType::GetBefore,
        MessageType::GetRangeByDepth,
        MessageType::GetChain,
    ]);
    let info_types = proptest::sample::select(vec![
        MessageType::CtxShow,
        MessageType::CtxTag,
        MessageType::CtxName,
    ]);
    let done_types = proptest::sample::select(vec![
        MessageType::KvPut,
        MessageType::KvDelete,
        MessageType::KvPutEx,
    ]);
    prop_oneof![
        (any::<u16>(), any::<[u32; 5]>(), name()).prop_map(|(version, l, server_name)| {
            Response::Admin(AdminResponse::Negotiated(admin::Negotiated {
                version,
                limits: ServerLimits {
                    frame_bytes_max: l[0],
                    requests_in_flight_max: l[1],
                    blob_bytes_max: l[2],
                    read_turns_max: l[3],
                    has_blobs_max: l[4],
                },
                server_name,
            }))
        }),
        any::<u64>().prop_map(|nonce| Response::Admin(AdminResponse::Pong(admin::Pong { nonce }))),
        (context_types, any::<(u64, u64, u32)>()).prop_map(
            |(message_type, (context_id, head_turn_id, head_depth))| {
                Response::Contexts(ContextsResponse::Context(contexts::Context {
                    message_type,
                    head: ContextHeadWire {
                        context_id,
                        head_turn_id,
                        head_depth,
                    },
                }))
            }
        ),
        (append_types, turn(), any::<bool>()).prop_map(|(message_type, turn, deduped)| {
            Response::Appends(AppendsResponse::Appended(appends::Appended {
                message_type,
                turn,
                deduped,
            }))
        }),
        turn().prop_map(|turn| Response::Reads(ReadsResponse::Turn(turn))),
        (
            page_types,
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec((turn(), payload()), 0..6)
        )
            .prop_map(
                |(message_type, next_before, tip_depth, entries)| Response::Reads(
                    ReadsResponse::Turns(reads::Turns {
                        message_type,
                        next_before,
                        tip_depth,
                        entries: entries
                            .into_iter()
                            .map(|(turn, payload)| TurnEntry { turn, payload })
                            .collect()
                    })
                )
            ),
        payload().prop_map(|payload| Response::Blobs(BlobsResponse::Blob(payload))),
        proptest::collection::vec(any::<bool>(), 0..50).prop_map(|present| Response::Blobs(
            BlobsResponse::BlobsHeld(blobs::BlobsHeld { present })
        )),
        (any::<[u64; 11]>(), any::<bool>()).prop_map(|(v, read_only)| Response::Admin(
            AdminResponse::Stats(stats_of(&v, read_only))
        )),
        (any::<[u64; 15]>(), any::<bool>()).prop_map(|(v, read_only)| Response::Admin(
            AdminResponse::ExtendedStats(admin::ExtendedStats {
                stats: Box::new(stats_of(&v, read_only)),
                gc: GcStatsWire {
                    live_bytes: v[11],
                    dead_bytes: v[12],
                    gc_runs: v[13],
                    bytes_reclaimed_total: v[14],
                },
            })
        )),
        (any::<[u64; 6]>(), any::<u32>()).prop_map(|(v, packs_compacted)| {
            Response::Admin(AdminResponse::GcDone(GcWire {
                turns_dead: v[0],
                blobs_dead: v[1],
                bytes_reclaimed: v[2],
                packs_compacted,
                live_bytes: v[3],
                dead_bytes: v[4],
                duration_ms: v[5],
            }))
        }),
        (error_code(), any::<u64>(), name()).prop_map(|(code, detail, message)| Response::Error {
            code,
            detail,
            message
        }),
        (info_types, context_info()).prop_map(|(message_type, info)| Response::Contexts(
            ContextsResponse::ContextInfo(contexts::ContextInfo { message_type, info })
        )),
        (context_info(), any::<bool>()).prop_map(|(info, created)| Response::Contexts(
            ContextsResponse::Opened(contexts::Opened { info, created })
        )),
        (
            prop_oneof![
                Just(None),
                any::<u64>().prop_map(|id| Some(ListCursorWire::Id(id))),
                "[a-z]{1,20}".prop_map(|name| Some(ListCursorWire::Name(name))),
            ],
            proptest::collection::vec(context_info(), 0..4)
        )
            .prop_map(|(next_cursor, contexts)| Response::Contexts(
                ContextsResponse::ContextList(contexts::ContextList {
                    next_cursor,
                    contexts
                })
            )),
        done_types
            .prop_map(|message_type| Response::Kv(KvResponse::Done(kv::Done { message_type }))),
        (hash(), payload()).prop_map(|(value_hash, payload)| Response::Kv(KvResponse::KvValue(
            kv::KvValue {
                value_hash,
                payload
            }
        ))),
        proptest::collection::vec((turn(), any::<bool>(), any::<bool>()), 0..4).prop_map(|turns| {
            Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns {
                turns: turns
                    .into_iter()
                    .map(|(turn, deduped, existing)| AppendedWire {
                        turn,
                        deduped,
                        existing,
                    })
                    .collect(),
            }))
        }),
        (
            any::<u64>(),
            proptest::collection::vec((turn(), extras()), 0..4)
        )
            .prop_map(
                |(next_before, turns)| Response::Reads(ReadsResponse::FoundTurns(
                    reads::FoundTurns { next_before, turns }
                ))
            ),
        (any::<[u64; 5]>(), "[a-z/]{0,40}").prop_map(|(v, dir)| {
            Response::Admin(AdminResponse::BackedUp(BackupWire {
                turns: v[0],
                blobs: v[1],
                bytes: v[2],
                linked_bytes: v[3],
                duration_ms: v[4],
                dir,
            }))
        }),
        (
            any::<[u64; 12]>(),
            (0usize..3, 0usize..7, any::<bool>()),
            ("[a-z0-9:/._-]{0,60}", "[a-z0-9:. ]{0,60}", "\\PC{0,80}"),
            proptest::collection::btree_map("[a-z_]{1,32}", any::<u64>(), 0..13),
        )
            .prop_map(
                |(v, (role, state, promoting), (target, primary, reason), failures)| {
                    Response::Admin(AdminResponse::ReplicationStats(Box::new(
                        ReplicationStatsWire {
                            role: ReplicationRoleWire::ALL[role],
                            state: ReplicationStateWire::ALL[state],
                            promoting,
                            generation: v[0],
                            epoch: v[1],
                            seq: v[2],
                            records: v[3],
                            records_unix_ms: v[4],
                            lag_ms: v[5],
                            lag_bytes: v[6],
                            objects_total: v[7],
                            bytes_total: v[8],
                            last_success_unix_ms: v[9],
                            backlog_objects: v[10],
                            segment_bytes_max: v[11],
                            target,
                            primary,
                            reason,
                            failures: failures.into_iter().collect(),
                        },
                    )))
                }
            ),
        role_answer(),
        tenants_listed(),
        (1u32.., 0u32..=3).prop_map(|(tenant_id, flags)| {
            Response::Admin(AdminResponse::TenantDeleted(admin::TenantDeleted {
                tenant_id,
                flags,
            }))
        }),
        (any::<u32>(), 1u16..).prop_map(|(tenant_id, key_version)| {
            Response::Admin(AdminResponse::TenantKeyRotated(admin::TenantKeyRotated {
                tenant_id,
                key_version,
            }))
        }),
        (
            prop_oneof![
                Just(MessageType::CtxDelete),
                Just(MessageType::CtxPrune),
                Just(MessageType::CtxTtl),
            ],
            context_info(),
            any::<u32>(),
            any::<u64>(),
        )
            .prop_map(|(message_type, info, floor_depth, ttl_ms)| {
                Response::Retention(RetentionResponse::Retention(retention::Retention {
                    message_type,
                    info,
                    floor_depth,
                    ttl_ms,
                }))
            }),
        (turn(), extras()).prop_map(|(turn, extras)| Response::Reads(ReadsResponse::TurnInfo(
            reads::TurnInfo {
                turn: Box::new(turn),
                extras
            }
        ))),
        (any::<u64>(), any::<u64>(), hash(), any::<u32>()).prop_map(
            |(turn_id, overlay_seq, payload_hash, payload_len)| Response::Overlays(
                OverlaysResponse::Patched(overlays::Patched {
                    turn_id,
                    overlay_seq,
                    payload_hash,
                    payload_len,
                })
            )
        ),
        (any::<u64>(), any::<u64>()).prop_map(|(turn_id, overlay_seq)| Response::Overlays(
            OverlaysResponse::Redacted(overlays::Redacted {
                turn_id,
                overlay_seq
            })
        )),
        (hash(), any::<u64>(), any::<bool>()).prop_map(
            |(payload_hash, payload_len, already_stored)| Response::Blobs(
                BlobsResponse::ChunkedStored(blobs::ChunkedStored {
                    payload_hash,
                    payload_len,
                    already_stored,
                })
            )
        ),
        (hash(), any::<u64>(), any::<u64>()).prop_map(
            |(payload_hash, turns_redacted, overlay_seq)| Response::Overlays(
                OverlaysResponse::Purged(overlays::Purged {
                    payload_hash,
                    turns_redacted,
                    overlay_seq,
                })
            )
        ),
        (log_cursor(), entries_v2()).prop_map(|(next_cursor, entries)| Response::Reads(
            ReadsResponse::TurnLogPage(reads::TurnLogPage {
                next_cursor,
                entries
            })
        )),
        (any::<u64>(), any::<u32>(), entries_v2()).prop_map(|(next_before, tip_depth, entries)| {
            Response::Reads(ReadsResponse::Page(reads::Page {
                next_before,
                tip_depth,
                entries,
            }))
        }),
        (hash(), any::<u64>(), any::<u64>(), payload()).prop_map(
            |(value_hash, ttl_ms, expires_at_unix_ms, payload)| {
                Response::Kv(KvResponse::KvValueEx(kv::KvValueEx {
                    value_hash,
                    ttl_ms,
                    expires_at_unix_ms,
                    payload,
                }))
            }
        ),
        proptest::collection::vec(
            proptest::option::of((hash(), any::<u64>(), any::<u64>(), payload())),
            0..4
        )
        .prop_map(|values| {
            let values = values
                .into_iter()
                .map(|value| {
                    value.map(
                        |(value_hash, ttl_ms, expires_at_unix_ms, payload)| kv::KvValueEx {
                            value_hash,
                            ttl_ms,
                            expires_at_unix_ms,
                            payload,
                        },
                    )
                })
                .collect();
            Response::Kv(KvResponse::KvValues(kv::KvValues { values }))
        }),
        (
            any::<bool>(),
            proptest::collection::vec((bytes(40), hash(), any::<u32>(), any::<[u64; 2]>()), 0..5)
        )
            .prop_map(|(touched, items)| {
                let items = items
                    .into_iter()
                    .map(
                        |(key, value_hash, value_len, [ttl_ms, expires])| KvItemExWire {
                            key,
                            value_hash,
                            value_len,
                            ttl_ms,
                            expires_at_unix_ms: expires,
                        },
                    )
                    .collect();
                Response::Kv(if touched {
                    KvResponse::KvTouched(kv::KvTouched { items })
                } else {
                    KvResponse::KvListedEx(kv::KvListedEx { items })
                })
            }),
        proptest::collection::vec((bytes(40), hash(), any::<u32>()), 0..5).prop_map(|items| {
            Response::Kv(KvResponse::KvListed(kv::KvListed {
                items: items
                    .into_iter()
                    .map(|(key, value_hash, value_len)| KvItemWire {
                        key,
                        value_hash,
                        value_len,
                    })
                    .collect(),
            }))
        }),
    ]
}

fn concat(chunks: Vec<Bytes>) -> Vec<u8> {
    chunks
        .iter()
        .flat_map(|chunk| chunk.iter().copied())
        .collect()
}

/// Feeds bytes to a frame reader in pieces of `step` bytes; returns the frames.
fn read_frames(bytes: &[u8], step: usize) -> Vec<(FrameHeader, Bytes)> {
    let mut reader = FrameReader::new(64 << 20);
    let mut frames = Vec::new();
    for piece in bytes.chunks(step.max(1)) {
        reader.buffer().extend_from_slice(piece);
        while let Some(frame) = reader.next_frame().unwrap() {
            frames.push(frame);
        }
    }
    assert_eq!(reader.pending_bytes(), 0);
    frames
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn requests_round_trip(request in request(), req_id in any::<u64>(), step in 1..200usize) {
        let mut contiguous = BytesMut::new();
        encode_request(req_id, &request, &mut contiguous).unwrap();
        let chunked = concat(encode_request_chunks(req_id, &request).unwrap());
        prop_assert_eq!(&contiguous[..], &chunked[..]);
        let frames = read_frames(&contiguous, step);
        prop_assert_eq!(frames.len(), 1);
        let (header, body) = frames.into_iter().next().unwrap();
        prop_assert_eq!(header.req_id, req_id);
        prop_assert_eq!(header.msg_type, request.message_type().code());
        prop_assert_eq!(header.flags, request.frame_flags());
        prop_assert_eq!(header.len as usize, contiguous.len() - HEADER_BYTES);
        prop_assert_eq!(decode_request(&header, body).unwrap(), request);
    }

    #[test]
    fn overlay_reads_and_answers_round_trip(
        request in overlay_request(),
        response in overlay_response(),
        req_id in any::<u64>(),
    ) {
        let bytes = concat(encode_request_chunks(req_id, &request).unwrap());
        let (header, body) = read_frames(&bytes, 7).into_iter().next().unwrap();
        prop_assert!(header.flags & frame_flags::OVERLAYS != 0);
        prop_assert_eq!(decode_request(&header, body.clone()).unwrap(), request);
        // A version-1 connection refuses the flag.
        prop_assert!(decode_request_as(1, &header, body).is_err());
        let bytes = concat(encode_response(req_id, &response));
        let (header, body) = read_frames(&bytes, 11).into_iter().next().unwrap();
        prop_assert_eq!(header.flags, frame_flags::OVERLAYS);
        prop_assert_eq!(decode_response(&header, body).unwrap(), response);
    }

    #[test]
    fn acknowledged_writes_round_trip(request in ack_after_request(), req_id in any::<u64>()) {
        let bytes = concat(encode_request_chunks(req_id, &request).unwrap());
        let (header, body) = read_frames(&bytes, 13).into_iter().next().unwrap();
        prop_assert_eq!(header.flags, request.frame_flags());
        prop_assert!(header.flags & frame_flags::ACK_AFTER != 0);
        prop_assert_eq!(decode_request_as(4, &header, body.clone()).unwrap(), request);
        // A connection of version 3 or older refuses the flag (and its write).
        for version in 1..4 {
            prop_assert!(decode_request_as(version, &header, body.clone()).is_err());
        }
    }

    #[test]
    fn responses_round_trip(response in response(), req_id in any::<u64>(), step in 1..500usize) {
        let bytes = concat(encode_response(req_id, &response));
        let frames = read_frames(&bytes, step);
        prop_assert_eq!(frames.len(), 1);
        let (header, body) = frames.into_iter().next().unwrap();
        prop_assert_eq!(header.req_id, req_id);
        prop_assert_eq!(header.msg_type, response.msg_type());
        prop_assert_eq!(decode_response(&header, body).unwrap(), response);
    }

    /// Random bodies under every message type: decoding returns a value or an error, never
    /// panics; a value re-encodes to exactly the bytes it came from.
    #[test]
    fn arbitrary_bodies_decode_or_fail_cleanly(msg_type in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..300), known in any::<bool>(), flags in 0..32u16) {
        let msg_type = if known { MessageType::ALL[usize::from(msg_type) % MessageType::ALL.len()].code() } else { msg_type };
        let header = FrameHeader { len: body.len() as u32, msg_type, flags, req_id: 5 };
        if let Ok(request) = decode_request(&header, Bytes::from(body.clone())) {
            let mut again = BytesMut::new();
            encode_request(5, &request, &mut again).unwrap();
            prop_assert_eq!(&again[HEADER_BYTES..], &body[..]);
            prop_assert_eq!(request.frame_flags(), flags);
            // ACK_AFTER only on the writes that take it, and never 3.
            if flags & frame_flags::ACK_AFTER != 0 {
                prop_assert!(request.message_type().takes_ack_after());
                prop_assert!(flags & frame_flags::ACK_AFTER != frame_flags::ACK_AFTER);
                prop_assert!(decode_request_as(3, &header, Bytes::from(body.clone())).is_err());
            }
        }
        let response_header = FrameHeader { msg_type: msg_type | RESPONSE_BIT, flags: 0, ..header };
        if let Ok(response) = decode_response(&response_header, Bytes::from(body.clone())) {
            let again = concat(encode_response(5, &response));
            prop_assert_eq!(&again[HEADER_BYTES..], &body[..]);
        }
    }

    /// A valid request cut anywhere, or with a flipped byte, never panics the decoder.
    #[test]
    fn damaged_requests_fail_cleanly(request in request(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), bit in 0..8u8) {
        let mut bytes = BytesMut::new();
        encode_request(1, &request, &mut bytes).unwrap();
        let mut header_bytes = [0u8; HEADER_BYTES];
        header_bytes.copy_from_slice(&bytes[..HEADER_BYTES]);
        let header = FrameHeader::decode(&header_bytes);
        let body = bytes[HEADER_BYTES..].to_vec();
        if !body.is_empty() {
            let short = body[..cut.index(body.len())].to_vec();
            let _ = decode_request(&FrameHeader { len: short.len() as u32, ..header }, Bytes::from(short));
            let mut flipped = body.clone();
            let at = flip.index(flipped.len());
            flipped[at] ^= 1 << bit;
            let _ = decode_request(&header, Bytes::from(flipped));
        }
    }
}

#[test]
fn fixed_sizes_match_the_document() {
    let turn = TurnWire {
        turn_id: 1,
        parent_turn_id: 0,
        context_id: 1,
        depth: 0,
        codec: 0,
        type_tag: 0,
        payload_hash: BlobHash([0; 32]),
        payload_len: 0,
        flags: 0,
        created_at_unix_ms: 0,
    };
    let bytes = concat(encode_response(
        1,
        &Response::Reads(ReadsResponse::Turn(turn)),
    ));
    assert_eq!(bytes.len(), HEADER_BYTES + TURN_WIRE_BYTES);
    let head = ContextHeadWire {
        context_id: 1,
        head_turn_id: 0,
        head_depth: 0,
    };
    let bytes = concat(encode_response(
        1,
        &Response::Contexts(ContextsResponse::Context(contexts::Context {
            message_type: MessageType::GetHead,
            head,
        })),
    ));
    assert_eq!(bytes.len(), HEADER_BYTES + CONTEXT_HEAD_BYTES);
    let stats = StatsWire::default();
    let bytes = concat(encode_response(
        1,
        &Response::Admin(AdminResponse::Stats(stats)),
    ));
    assert_eq!(bytes.len(), HEADER_BYTES + 96);
    let gc = GcStatsWire::default();
    let stats = Box::new(stats);
    let bytes = concat(encode_response(
        1,
        &Response::Admin(AdminResponse::ExtendedStats(admin::ExtendedStats {
            stats,
            gc,
        })),
    ));
    assert_eq!(
        bytes.len(),
        HEADER_BYTES + 128,
        "STATS_EX: STATS' 96 bytes + 4 × u64"
    );
    let bytes = concat(encode_response(
        1,
        &Response::Admin(AdminResponse::GcDone(GcWire::default())),
    ));
    assert_eq!(bytes.len(), HEADER_BYTES + 56);
    let role = admin::RoleAnswer {
        role: admin::ServerRole::Off,
        accepts_writes: true,
        ack_after: AckAfter::Local,
        epoch: 0,
        lease_ms: 0,
        lease_age_ms: 0,
        ack_open_ms: 0,
        failovers: 0,
        last_failover_ms: 0,
        remote_waiting: 0,
        remote_acks_total: 0,
        remote_unconfirmed_total: 0,
        remote_ack_us_p50: 0,
        remote_ack_us_p99: 0,
        primary: String::new(),
        holder: String::new(),
    };
    let bytes = concat(encode_response(
        1,
        &Response::Admin(AdminResponse::RoleAnswer(Box::new(role))),
    ));
    assert_eq!(
        bytes.len(),
        HEADER_BYTES + admin::ROLE_FIXED_BYTES + 4,
        "ROLE: 84 fixed bytes, two empty texts"
    );
    assert_eq!(admin::ROLE_FIXED_BYTES, 84);
    let mut request = BytesMut::new();
    encode_request(
        1,
        &Request::Admin(AdminRequest::Gc(admin::Gc)),
        &mut request,
    )
    .unwrap();
    assert_eq!(request.len(), HEADER_BYTES + 4, "GC: gc_flags u32");
    let stored = Response::Blobs(BlobsResponse::ChunkedStored(blobs::ChunkedStored {
        payload_hash: BlobHash([0; 32]),
        payload_len: 0,
        already_stored: true,
    }));
    let bytes = concat(encode_response(1, &stored));
    assert_eq!(bytes.len(), HEADER_BYTES + CHUNKED_STORED_BYTES);
    // PUT_CHUNKED: hash, base hash and kept, chunk count, 36 bytes per chunk, sent count,
    // 8 + len per sent chunk.
    let mut request = BytesMut::new();
    encode_request(1, &chunked(3, &[(1, 5)]), &mut request).unwrap();
    assert_eq!(
        request.len(),
        HEADER_BYTES + 32 + 36 + 4 + 3 * CHUNK_ENTRY_BYTES + 4 + 8 + 5
    );
}

/// A PUT_CHUNKED of `count` chunks of 5 bytes each (the last one `last_len`), sending
/// `(index, len)` of bytes for each of `sent`.
fn chunked_with(count: u32, last_len: u32, sent: &[(u32, usize)]) -> Request {
    Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
        payload_hash: BlobHash([1; 32]),
        base: None,
        chunks: (0..count)
            .map(|index| ChunkWire {
                hash: BlobHash([index as u8; 32]),
                len: if index + 1 == count { last_len } else { 5 },
            })
            .collect(),
        sent: sent
            .iter()
            .map(|&(index, len)| SentChunkWire {
                index,
                bytes: Bytes::from(vec![7u8; len]),
            })
            .collect(),
    }))
}

fn chunked(count: u32, sent: &[(u32, usize)]) -> Request {
    chunked_with(count, 5, sent)
}

/// A request's frame header and body as bytes, bypassing `check_request`: what a hostile or
/// buggy client could send.
fn raw_put_chunked(build: impl FnOnce(&mut Vec<u8>)) -> (FrameHeader, Bytes) {
    let mut body = Vec::new();
    build(&mut body);
    let header = FrameHeader {
        len: body.len() as u32,
        msg_type: MessageType::PutChunked.code(),
        flags: 0,
        req_id: 1,
    };
    (header, Bytes::from(body))
}

/// PUT_CHUNKED's limits hold on both sides: the encoder refuses what the decoder refuses,
/// limits are TOO_LARGE (typed, with the limit), malformed lists BAD_FRAME; nothing panics.
#[test]
fn put_chunked_limits_hold_in_the_encoder_and_the_decoder() {
    // What is well formed goes through, sent bytes by reference when large.
    let good = chunked(4, &[(0, 5), (2, 5), (3, 5)]);
    check_request(&good).unwrap();
    let bytes = Bytes::from(vec![3u8; 100_000]);
    let large = Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
        payload_hash: BlobHash([1; 32]),
        base: None,
        chunks: vec![ChunkWire {
            hash: BlobHash([2; 32]),
            len: 100_000,
        }],
        sent: vec![SentChunkWire {
            index: 0,
            bytes: bytes.clone(),
        }],
    }));
    let frame = encode_request_chunks(1, &large).unwrap();
    assert!(
        frame.iter().any(|chunk| chunk.as_ptr() == bytes.as_ptr()),
        "a large chunk is sent where it is, not copied"
    );
    // The encoder refuses, naming the field.
    let refused = |request: Request| check_request(&request).unwrap_err().field;
    assert_eq!(refused(chunked(0, &[])), "chunks");
    assert_eq!(refused(chunked(CHUNKS_PER_PAYLOAD_MAX + 1, &[])), "chunks");
    assert_eq!(refused(chunked_with(2, 0, &[])), "chunk len");
    assert_eq!(
        refused(chunked_with(2, CHUNK_BYTES_MAX + 1, &[])),
        "chunk len"
    );
    let index = "sent index (strictly increasing, into chunks)";
    assert_eq!(refused(chunked(2, &[(2, 5)])), index);
    assert_eq!(refused(chunked(3, &[(1, 5), (1, 5)])), index);
    assert_eq!(refused(chunked(3, &[(2, 5), (1, 5)])), index);
    assert_eq!(
        refused(chunked(3, &[(1, 4)])),
        "sent chunk bytes (its chunk's len)"
    );
    assert!(check_request(&chunked(CHUNKS_PER_PAYLOAD_MAX, &[])).is_ok());

    // The decoder: each limit is TOO_LARGE with its value and limit.
    let too_large = |(header, body): (FrameHeader, Bytes)| match decode_request(&header, body) {
        Err(DecodeError::TooLarge {
            field,
            value,
            limit,
            ..
        }) => (field, value, limit),
        other => panic!("expected TOO_LARGE, got {other:?}"),
    };
    let bad_frame = |(header, body): (FrameHeader, Bytes)| {
        let error = decode_request(&header, body).unwrap_err();
        assert_eq!(error.code(), ErrorCode::BadFrame, "{error}");
        error
    };
    let entry = |body: &mut Vec<u8>, len: u32| {
        body.extend_from_slice(&[9; 32]);
        body.extend_from_slice(&len.to_le_bytes());
    };
    let sent = |body: &mut Vec<u8>, index: u32, len: u32, bytes: usize| {
        body.extend_from_slice(&index.to_le_bytes());
        body.extend_from_slice(&len.to_le_bytes());
        body.extend(std::iter::repeat_n(7u8, bytes));
    };
    let head = |body: &mut Vec<u8>, count: u32| {
        body.extend_from_slice(&[1; 32]);
        body.extend_from_slice(&[0; 36]); // no base
        body.extend_from_slice(&count.to_le_bytes());
    };
    // A chunk count over the limit fails before any entry is read (or allocated).
    let count = CHUNKS_PER_PAYLOAD_MAX + 1;
    assert_eq!(
        too_large(raw_put_chunked(|body| head(body, count))),
        ("chunk_count", u64::from(count), 65_536)
    );
    assert_eq!(
        too_large(raw_put_chunked(|body| {
            head(body, 1);
            entry(body, CHUNK_BYTES_MAX + 1);
        })),
        ("chunk len", u64::from(CHUNK_BYTES_MAX) + 1, 1 << 20)
    );
    assert_eq!(
        too_large(raw_put_chunked(|body| {
            head(body, 1);
            entry(body, 5);
            body.extend_from_slice(&2u32.to_le_bytes());
        })),
        ("sent_count", 2, 1)
    );
    assert_eq!(
        too_large(raw_put_chunked(|body| {
            head(body, 2);
            entry(body, 5);
            entry(body, 5);
            body.extend_from_slice(&1u32.to_le_bytes());
            sent(body, 2, 5, 5);
        })),
        ("sent index", 2, 1)
    );
    bad_frame(raw_put_chunked(|body| head(body, 0)));
    // A base keeping no chunk, kept chunks of no base; a base's kept chunks count against the
    // limit.
    let with_base = |body: &mut Vec<u8>, base: [u8; 32], kept: u32, count: u32| {
        body.extend_from_slice(&[1; 32]);
        body.extend_from_slice(&base);
        body.extend_from_slice(&kept.to_le_bytes());
        body.extend_from_slice(&count.to_le_bytes());
    };
    bad_frame(raw_put_chunked(|body| with_base(body, [5; 32], 0, 1)));
    bad_frame(raw_put_chunked(|body| with_base(body, [0; 32], 3, 1)));
    assert_eq!(
        too_large(raw_put_chunked(|body| with_base(
            body,
            [5; 32],
            CHUNKS_PER_PAYLOAD_MAX,
            1
        ))),
        ("chunk_count", u64::from(CHUNKS_PER_PAYLOAD_MAX) + 1, 65_536)
    );
    let based = |kept: u32, count: u32| match chunked(count, &[]) {
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
            payload_hash,
            chunks,
            sent,
            ..
        })) => Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
            payload_hash,
            base: Some(ChunkBaseWire {
                hash: BlobHash([5; 32]),
                kept,
            }),
            chunks,
            sent,
        })),
        other => other,
    };
    assert!(check_request(&based(10, 3)).is_ok());
    assert!(check_request(&based(0, 3)).is_err());
    assert!(check_request(&based(CHUNKS_PER_PAYLOAD_MAX, 1)).is_err());
    bad_frame(raw_put_chunked(|body| {
        head(body, 1);
        entry(body, 0);
        body.extend_from_slice(&0u32.to_le_bytes());
    }));
    // Indexes repeat or go down; a sent chunk's len differs from its entry's.
    for (first, second) in [(1, 1), (1, 0)] {
        bad_frame(raw_put_chunked(|body| {
            head(body, 2);
            entry(body, 5);
            entry(body, 5);
            body.extend_from_slice(&2u32.to_le_bytes());
            sent(body, first, 5, 5);
            sent(body, second, 5, 5);
        }));
    }
    bad_frame(raw_put_chunked(|body| {
        head(body, 1);
        entry(body, 5);
        body.extend_from_slice(&1u32.to_le_bytes());
        sent(body, 0, 4, 4);
    }));
    // Bytes running past the body, and bytes after its end.
    let truncated = raw_put_chunked(|body| {
        head(body, 1);
        entry(body, 5);
        body.extend_from_slice(&1u32.to_le_bytes());
        sent(body, 0, 5, 4);
    });
    assert!(matches!(
        decode_request(&truncated.0, truncated.1),
        Err(DecodeError::Truncated { .. })
    ));
    let trailing = raw_put_chunked(|body| {
        head(body, 1);
        entry(body, 5);
        body.extend_from_slice(&0u32.to_le_bytes());
        body.push(0);
    });
    assert!(matches!(
        decode_request(&trailing.0, trailing.1),
        Err(DecodeError::TrailingBytes { .. })
    ));
    // The answer: already_stored is 0 or 1, the reserved bytes zero.
    let header = FrameHeader {
        len: CHUNKED_STORED_BYTES as u32,
        msg_type: MessageType::PutChunked.response_code(),
        flags: 0,
        req_id: 1,
    };
    let mut body = vec![0u8; CHUNKED_STORED_BYTES];
    body[40] = 2;
    assert!(decode_response(&header, Bytes::from(body.clone())).is_err());
    body[40] = 1;
    body[47] = 1;
    assert!(decode_response(&header, Bytes::from(body.clone())).is_err());
    body[47] = 0;
    assert!(decode_response(&header, Bytes::from(body)).is_ok());
}

#[test]
fn large_payloads_are_sent_by_reference() {
    let data = Bytes::from(vec![7u8; 100_000]);
    let response = Response::Blobs(BlobsResponse::Blob(PayloadWire {
        encoding: PayloadEncoding::Raw,
        raw_len: 100_000,
        data: data.clone(),
    }));
    let chunks = encode_response(9, &response);
    assert_eq!(chunks.len(), 2);
    assert_eq!(
        chunks[1].as_ptr(),
        data.as_ptr(),
        "the payload chunk is the caller's bytes"
    );
}

#[test]
fn strictness() {
    // Unknown flag bits, non-zero reserved bytes and trailing bytes are BAD_FRAME.
    let header = |msg_type: MessageType, len: usize| FrameHeader {
        len: len as u32,
        msg_type: msg_type.code(),
        flags: 0,
        req_id: 1,
    };
    let mut body = vec![0u8; 16];
    body[12] = 0x80; // read_flags bit 31
    let error = decode_request(&header(MessageType::GetLast, 16), Bytes::from(body)).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadFrame);
    let error =
        decode_request(&header(MessageType::Ping, 9), Bytes::from(vec![0u8; 9])).unwrap_err();
    assert!(matches!(error, DecodeError::TrailingBytes { .. }));
    let error =
        decode_request(&header(MessageType::Ping, 7), Bytes::from(vec![0u8; 7])).unwrap_err();
    assert!(matches!(error, DecodeError::Truncated { .. }));
    let unknown = FrameHeader {
        len: 0,
        msg_type: 0x00F0,
        flags: 0,
        req_id: 1,
    };
    assert_eq!(
        decode_request(&unknown, Bytes::new()).unwrap_err().code(),
        ErrorCode::UnknownMessage
    );
    // An append whose payload_len runs past the body.
    let mut append = BytesMut::new();
    encode_request(
        1,
        &Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
            context: ContextRef::Id(1),
            expected_head: None,
            type_tag: 0,
            codec: 0,
            payload: Bytes::from_static(b"abc"),
        })),
        &mut append,
    )
    .unwrap();
    let body = Bytes::copy_from_slice(&append[HEADER_BYTES..append.len() - 1]);
    assert!(decode_request(&header(MessageType::AppendTurn, body.len()), body).is_err());
    // A HAS_BLOBS count far above what the body holds fails on the body, not on an allocation.
    let mut body = vec![0u8; 8];
    body[..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
    assert!(matches!(
        decode_request(&header(MessageType::HasBlobs, 8), Bytes::from(body)),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn version_2_stays_out_of_version_1() {
    let frame = |request: &Request| {
        let mut bytes = BytesMut::new();
        encode_request(3, request, &mut bytes).unwrap();
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&bytes[..HEADER_BYTES]);
        (
            FrameHeader::decode(&header),
            Bytes::copy_from_slice(&bytes[HEADER_BYTES..]),
        )
    };
    // A version-2 message on a version-1 connection: unknown, the stream intact.
    let (header, body) = frame(&Request::Contexts(ContextsRequest::CtxShow(
        contexts::CtxShow {
            context: ContextRef::Id(1),
        },
    )));
    let error = decode_request_as(1, &header, body.clone()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::UnknownMessage);
    assert!(decode_request_as(2, &header, body).is_ok());
    // So are GC, STATS_EX and PUT_CHUNKED: a version-1 client keeps the 96-byte STATS and
    // appends whole payloads.
    for request in [
        Request::Admin(AdminRequest::Gc(admin::Gc)),
        Request::Admin(AdminRequest::StatsEx(admin::StatsEx)),
        chunked(2, &[(1, 5)]),
    ] {
        let (header, body) = frame(&request);
        let error = decode_request_as(1, &header, body.clone()).unwrap_err();
        assert_eq!(error.code(), ErrorCode::UnknownMessage);
        assert_eq!(decode_request_as(2, &header, body).unwrap(), request);
    }
    // GC's gc_flags defines no bit yet.
    let (header, _) = frame(&Request::Admin(AdminRequest::Gc(admin::Gc)));
    let error = decode_request_as(2, &header, Bytes::from_static(&[1, 0, 0, 0])).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadFrame);
    // A context by name sets CTX_BY_NAME; version 1 knows no flags.
    let by_name = Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
        context: ContextRef::Name("thread-1".into()),
    }));
    let (header, body) = frame(&by_name);
    assert_eq!(header.flags, frame_flags::CTX_BY_NAME);
    let error = decode_request_as(1, &header, body.clone()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadFrame);
    assert_eq!(decode_request_as(2, &header, body).unwrap(), by_name);
    // The flag on a message without a context, and an empty name, are bad frames.
    let (ping, body) = frame(&Request::Admin(AdminRequest::Ping(admin::Ping {
        nonce: 1,
    })));
    let flagged = FrameHeader {
        flags: frame_flags::CTX_BY_NAME,
        ..ping
    };
    let error = decode_request(&flagged, body).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadFrame);
    let (header, _) = frame(&by_name);
    let empty = Bytes::from_static(&[0, 0]);
    let header = FrameHeader { len: 2, ..header };
    assert_eq!(
        decode_request(&header, empty).unwrap_err().code(),
        ErrorCode::BadFrame
    );
    // The encoder refuses a name it cannot send (0 would mean "by id").
    let error = check_request(&Request::Contexts(ContextsRequest::CtxShow(
        contexts::CtxShow {
            context: ContextRef::Name(String::new()),
        },
    )))
    .unwrap_err();
    assert_eq!((error.field, error.min), ("context name", 1));
}

/// What the encoder refuses the decoder refuses too, so a decoded request always encodes back
/// (found by fuzz/frame_decoder: a BACKUP with an empty directory decoded, then could not be
/// encoded).
#[test]
fn a_backup_without_a_directory_does_not_decode() {
    let header = |msg_type: MessageType, len: usize| FrameHeader {
        len: len as u32,
        msg_type: msg_type.code(),
        flags: 0,
        req_id: 1,
    };
    let body = Bytes::from_static(&[0, 0]);
    assert!(decode_request(&header(MessageType::Backup, body.len()), body).is_err());
    let body = Bytes::from_static(&[1, 0, b'/']);
    assert!(decode_request(&header(MessageType::Backup, body.len()), body).is_ok());
}

/// STATS' eleven counters from the first of `v`.
fn stats_of(v: &[u64], read_only: bool) -> StatsWire {
    StatsWire {
        turns: v[0],
        contexts: v[1],
        blobs: v[2],
        logical_bytes: v[3],
        unique_bytes: v[4],
        stored_bytes: v[5],
        dedup_hits: v[6],
        connections: v[7],
        requests_total: v[8],
        errors_total: v[9],
        uptime_ms: v[10],
        read_only,
    }
}
