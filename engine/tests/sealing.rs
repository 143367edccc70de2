//! Payloads sealed per tenant (decision 0032 §4–§5, build plan step 3): with a master key,
//! every blob body a shard stores (whole payloads, chunks, key-value values; the operator's
//! too) is sealed under its tenant's data key, so a marker in the payloads is nowhere on the
//! disk in plain text, not after a collection's compaction either; the keyring reopens only
//! under its master key; `verify` opens every sealed body with the key and checks checksums without it;
//! a store that sealed nothing before starts sealing its new payloads and keeps reading its
//! old ones, its tenants' addresses unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{append, block_on, chat_payload, config, gc_config};
use ctxstore_engine::seal::MasterKey;
use ctxstore_engine::{
    BlobHash, ContextId, ContextRef, Engine, EngineConfig, NewContext, OpenError, TenantId, verify,
    verify_sealed,
};
use ctxstore_testsupport::files_holding;

const MARKER: &[u8] = b"MARKER-c0ffee-5ea1ed-payload";

fn key_of(hex: &str) -> Arc<MasterKey> {
    Arc::new(MasterKey::from_hex(hex).unwrap())
}
const KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
const OTHER_KEY: &str = "ff0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeee";

fn sealing(config: EngineConfig, hex: &str) -> EngineConfig {
    EngineConfig {
        master_key: Some(key_of(hex)),
        ..config
    }
}

fn create(engine: &Engine, tenant_id: TenantId) -> ContextId {
    let scoped = engine.scoped(tenant_id);
    block_on(scoped.create(NewContext::default()))
        .unwrap()
        .context
        .head
        .context_id
}

/// Payloads with the marker in them: small and compressible, small and not, and one past the
/// chunking threshold (stored as chunks and a manifest).
fn marked_payloads(seed: u64) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    for (index, len) in [200_usize, 5_000, 60_000].into_iter().enumerate() {
        let mut payload = chat_payload(seed + index as u64, len);
        for at in (0..payload.len() - MARKER.len()).step_by(997) {
            payload[at..at + MARKER.len()].copy_from_slice(MARKER);
        }
        payloads.push(payload);
    }
    let mut tiny = MARKER.to_vec();
    tiny.extend_from_slice(&seed.to_le_bytes());
    payloads.push(tiny);
    payloads
}

/// Tenant acme registered in `engine`, and one context of it holding `marked_payloads(seed)`.
fn acme_with_payloads(engine: &Engine, seed: u64) -> (TenantId, ContextId, Vec<Vec<u8>>) {
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let context = create(engine, acme);
    let payloads = marked_payloads(seed);
    for payload in &payloads {
        append(&engine.scoped(acme), context, payload, None).unwrap();
    }
    (acme, context, payloads)
}

fn read_all(engine: &Engine, tenant_id: TenantId, payloads: &[Vec<u8>]) {
    let scoped = engine.scoped(tenant_id);
    for payload in payloads {
        let read = block_on(scoped.blob(BlobHash::of(payload))).unwrap();
        assert_eq!(&read[..], &payload[..], "tenant {tenant_id:?}");
    }
}

#[test]
fn a_sealing_store_never_writes_a_payload_in_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(gc_config(dir.path()), KEY)).unwrap();
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let acme_payloads = marked_payloads(1);
    let operator_payloads = marked_payloads(2);
    let acme_context = create(&engine, acme);
    let scoped = engine.scoped(acme);
    for payload in &acme_payloads {
        append(&scoped, acme_context, payload, None).unwrap();
    }
    // A key-value value is a blob too: sealed alike.
    let value = bytes::Bytes::from([MARKER, b" in a key-value value"].concat());
    let entries = vec![(b"memory".to_vec(), value.clone())];
    block_on(scoped.kv_put(&ContextRef::Id(acme_context), entries, false)).unwrap();
    let operator_context = create(&engine, TenantId::OPERATOR);
    for payload in &operator_payloads {
        append(&engine, operator_context, payload, None).unwrap();
    }
    read_all(&engine, acme, &acme_payloads);
    read_all(&engine, TenantId::OPERATOR, &operator_payloads);
    assert_eq!(files_holding(dir.path(), MARKER), Vec::<String>::new());
    let entry = scoped
        .kv_get(&ContextRef::Id(acme_context), b"memory")
        .unwrap()
        .unwrap();
    read_all(&engine, acme, &[value.to_vec()]);
    assert_eq!(entry.value_len as usize, value.len());

    // A collection's compaction moves sealed records as they are.
    let doomed = create(&engine, acme);
    append(&scoped, doomed, &chat_payload(77, 4000), None).unwrap();
    block_on(scoped.delete_context(&ContextRef::Id(doomed))).unwrap();
    engine.gc().unwrap();
    read_all(&engine, acme, &acme_payloads);
    engine.shutdown();
    assert_eq!(files_holding(dir.path(), MARKER), Vec::<String>::new());

    // Reopened under its key: the same payloads, the same addresses.
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    read_all(&engine, acme, &acme_payloads);
    read_all(&engine, TenantId::OPERATOR, &operator_payloads);
    engine.shutdown();

    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.sealed >= 8, "{report}");
    assert!(report.notes.iter().all(|note| !note.contains("sealed")));
    // Without the key: checksums only, said so, still sound.
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(
        report
            .notes
            .iter()
            .any(|note| note.contains("sealed blob bodies")),
        "{report}"
    );
}

#[test]
fn the_keyring_opens_only_under_its_master_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let context = create(&engine, acme);
    append(
        &engine.scoped(acme),
        context,
        b"sealed under acme's key",
        None,
    )
    .unwrap();
    engine.shutdown();

    let wrong = Engine::open(sealing(config(dir.path()), OTHER_KEY)).unwrap_err();
    assert!(
        matches!(&wrong, OpenError::Config(text) if text.contains("master-key check")),
        "{wrong}"
    );
    let keyless = Engine::open(config(dir.path())).unwrap_err();
    assert!(
        matches!(&keyless, OpenError::Config(text) if text.contains("--master-key-file")),
        "{keyless}"
    );
    let wrong = verify_sealed(dir.path(), Some(key_of(OTHER_KEY))).unwrap_err();
    assert!(wrong.to_string().contains("master-key check"), "{wrong}");
    // Neither refusal touched the store.
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let scoped = engine.scoped(acme);
    let read = block_on(scoped.blob(BlobHash::of(b"sealed under acme's key"))).unwrap();
    assert_eq!(&read[..], b"sealed under acme's key");
    engine.shutdown();
}

#[test]
fn a_store_that_starts_sealing_keeps_its_plain_payloads_and_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let (acme, context, old) = acme_with_payloads(&engine, 3);
    engine.shutdown();
    assert!(!files_holding(dir.path(), MARKER).is_empty());

    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    // Its old payloads read at their (derived) addresses; one sent again is a dedup hit, not
    // a second copy.
    read_all(&engine, acme, &old);
    let scoped = engine.scoped(acme);
    let again = append(&scoped, context, &old[1], None).unwrap();
    assert!(again.deduped, "stored once, at its old address");
    let new = b"NEWMARK-after-sealing-began, sealed".to_vec();
    append(&scoped, context, &new, None).unwrap();
    // A tenant registered now gets random keys and seals from its first payload.
    let globex = block_on(engine.register_tenant("globex")).unwrap();
    let theirs = create(&engine, globex);
    append(&engine.scoped(globex), theirs, b"NEWMARK globex", None).unwrap();
    engine.shutdown();
    assert_eq!(files_holding(dir.path(), b"NEWMARK"), Vec::<String>::new());

    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    read_all(&engine, acme, &old);
    read_all(&engine, acme, &[new]);
    read_all(&engine, globex, &[b"NEWMARK globex".to_vec()]);
    engine.shutdown();
    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_backup_opens_only_beside_the_keyring_it_was_sealed_under() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let (acme, _, payloads) = acme_with_payloads(&engine, 4);
    let backup = tempfile::tempdir().unwrap();
    let to = backup.path().join("copy");
    engine.backup(&to).unwrap();
    engine.shutdown();
    assert_eq!(files_holding(&to, MARKER), Vec::<String>::new());
    assert!(!to.join("keyring").exists(), "a backup never holds a key");

    // Its meta file says it seals: without the keyring it is refused, not given a new one
    // that opens nothing; with or without a master key.
    for config in [sealing(config(&to), KEY), config(&to)] {
        let refused = Engine::open(config).unwrap_err();
        assert!(
            matches!(&refused, OpenError::Config(text) if text.contains("keyring")),
            "{refused}"
        );
    }
    assert!(!to.join("keyring").exists());
    std::fs::copy(dir.path().join("keyring"), to.join("keyring")).unwrap();
    let engine = Engine::open(sealing(config(&to), KEY)).unwrap();
    read_all(&engine, acme, &payloads);
    engine.shutdown();
}

/// A stream's deltas are records of `turns.log` (op 15 when the store seals): sealed under
/// the context's tenant's key there, opened by replay at the next open, read back whole, and
/// its end stores the bytes as a sealed blob. A delta larger than one sealed record is cut
/// into several, each at its own offset.
#[test]
fn an_open_streams_deltas_are_sealed_in_the_log_and_replayed() {
    use ctxstore_engine::AppendRequest;
    use ctxstore_engine::streams::{NO_OWNER, StreamOwner, StreamRead};
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let scoped = engine.scoped(acme);
    let context = create(&engine, acme);
    let request = AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: (),
        options: Default::default(),
    };
    let stream = block_on(scoped.open_stream(request, StreamOwner::NONE)).unwrap();
    let mut whole = Vec::new();
    for piece in [
        [MARKER, b" token one"].concat(),
        [b"and ".as_slice(), MARKER].concat(),
        marked_payloads(5)[1].clone(),
    ] {
        whole.extend_from_slice(&piece);
        let delta = bytes::Bytes::from(piece);
        block_on(scoped.append_delta(stream.stream_id, None, delta, NO_OWNER)).unwrap();
    }
    let read = |engine: &Engine| match engine
        .scoped(acme)
        .read_stream(stream.stream_id, 0, usize::MAX)
        .unwrap()
    {
        StreamRead::Open { bytes, .. } => bytes.to_vec(),
        StreamRead::Ended(end) => panic!("{end:?}"),
    };
    assert_eq!(read(&engine), whole);
    engine.shutdown();
    assert_eq!(files_holding(dir.path(), MARKER), Vec::<String>::new());
    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok(), "{report}");
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");

    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    assert_eq!(read(&engine), whole, "replay opened every sealed delta");
    let scoped = engine.scoped(acme);
    let ended = block_on(scoped.seal_stream(stream.stream_id, NO_OWNER)).unwrap();
    let last = block_on(scoped.last(context, 1, true)).unwrap();
    assert_eq!(last.turns[0].turn.turn_id, ended.turn.turn_id);
    assert_eq!(last.turns[0].payload.as_deref(), Some(&whole[..]));
    engine.shutdown();
    assert_eq!(files_holding(dir.path(), MARKER), Vec::<String>::new());
}

/// Erasure (decision 0032 §6): deleting a tenant destroys its keys in the keyring and deletes
/// its contexts (op 21); its open stream is aborted; nothing of it reads back, here, after a
/// reopen (whose replay meets its sealed deltas and cannot open them), or in a backup taken
/// before the deletion and opened beside today's keyring (a restore to an earlier point): that
/// store finishes the deletion itself. A collection gives the tenant's bytes back; `verify`
/// counts its bodies as erased, not as damage. Another tenant is untouched.
#[test]
fn deleting_a_tenant_forgets_its_keys_everywhere() {
    use ctxstore_engine::AppendRequest;
    use ctxstore_engine::streams::{NO_OWNER, StreamOwner};
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(gc_config(dir.path()), KEY)).unwrap();
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let globex = block_on(engine.register_tenant("globex")).unwrap();
    let (acme_payloads, globex_payloads) = (marked_payloads(8), marked_payloads(9));
    let acme_context = create(&engine, acme);
    let globex_context = create(&engine, globex);
    let scoped = engine.scoped(acme);
    for payload in &acme_payloads {
        append(&scoped, acme_context, payload, None).unwrap();
    }
    for payload in &globex_payloads {
        append(&engine.scoped(globex), globex_context, payload, None).unwrap();
    }
    let entries = vec![(b"memory".to_vec(), bytes::Bytes::from_static(b"likes tea"))];
    block_on(scoped.kv_put(&ContextRef::Id(acme_context), entries, false)).unwrap();
    let request = AppendRequest {
        context_id: acme_context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: (),
        options: Default::default(),
    };
    let stream = block_on(scoped.open_stream(request, StreamOwner::NONE)).unwrap();
    let delta = bytes::Bytes::from([MARKER, b" streamed"].concat());
    block_on(scoped.append_delta(stream.stream_id, None, delta, NO_OWNER)).unwrap();
    let before = tempfile::tempdir().unwrap();
    let backup = before.path().join("copy");
    engine.backup(&backup).unwrap();
    assert!(engine.tenant_usage(acme).bytes > 0);

    assert_eq!(block_on(engine.delete_tenant("acme")).unwrap(), acme);
    assert_eq!(
        block_on(engine.delete_tenant("acme")).unwrap(),
        acme,
        "again: the same"
    );
    assert!(engine.tenant_deleted(acme) && !engine.tenant_ready(acme));
    assert!(!engine.tenant_deleted(globex) && engine.tenant_ready(globex));
    assert!(block_on(engine.delete_tenant("nobody")).is_err());
    assert!(block_on(engine.scoped(globex).delete_tenant("acme")).is_err());
    let gone = |engine: &Engine| {
        let scoped = engine.scoped(acme);
        assert!(block_on(scoped.last(acme_context, 1, true)).is_err());
        assert!(
            scoped
                .kv_get(&ContextRef::Id(acme_context), b"memory")
                .is_err()
        );
        assert!(scoped.read_stream(stream.stream_id, 0, 64).is_err());
        for payload in &acme_payloads {
            assert!(block_on(scoped.blob(BlobHash::of(payload))).is_err());
        }
        assert!(block_on(scoped.create(NewContext::default())).is_err());
        read_all(engine, globex, &globex_payloads);
    };
    gone(&engine);
    let listed = engine.tenants();
    assert!(
        listed
            .iter()
            .any(|tenant| tenant.name == "acme" && tenant.deleted)
    );
    // The name stays the deleted tenant's: registering it again gives no fresh tenant.
    assert_eq!(block_on(engine.register_tenant("acme")).unwrap(), acme);
    assert!(engine.tenant_deleted(acme));
    let keyring = std::fs::read(dir.path().join("keyring")).unwrap();
    let keyring = ctxstore_engine::seal::Keyring::decode(&keyring, &key_of(KEY)).unwrap();
    assert!(matches!(
        keyring.tenant(acme.0),
        Some(ctxstore_engine::seal::TenantKeys::Deleted { .. })
    ));
    engine.shutdown();

    // Reopened: replay meets the sealed deltas it cannot open, and the deletion holds.
    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok() && report.erased > 0, "{report}");
    let engine = Engine::open(sealing(gc_config(dir.path()), KEY)).unwrap();
    gone(&engine);
    // A collection gives the bytes back.
    engine.gc().unwrap();
    assert_eq!(engine.tenant_usage(acme).bytes, 0);
    assert!(engine.tenant_usage(globex).bytes > 0);
    engine.shutdown();
    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok() && report.erased == 0, "{report}");

    // A copy from before the deletion, opened beside today's keyring (a restore reads the
    // replica's current one): the tenant does not come back.
    std::fs::copy(dir.path().join("keyring"), backup.join("keyring")).unwrap();
    let engine = Engine::open(sealing(config(&backup), KEY)).unwrap();
    assert!(engine.tenant_deleted(acme));
    gone(&engine);
    engine.shutdown();
    // The store finished the deletion in its own log: it holds without the tombstone's help.
    let engine = Engine::open(sealing(config(&backup), KEY)).unwrap();
    gone(&engine);
    engine.shutdown();
}

/// Master key rotation (decision 0032 §7): with the new key first and the old one second, the
/// open rewraps every key of the keyring under the new key; no pack byte changes; from then
/// on the new key alone opens the store and the old one is refused.
#[test]
fn a_master_key_rotation_rewraps_the_keyring_and_rewrites_no_payload() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let (acme, _, payloads) = acme_with_payloads(&engine, 12);
    engine.shutdown();
    let packs = |dir: &std::path::Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut packs = Vec::new();
        for shard in std::fs::read_dir(dir.join("blobs")).unwrap() {
            for file in std::fs::read_dir(shard.unwrap().path()).unwrap() {
                let path = file.unwrap().path();
                if path.extension().is_some_and(|ext| ext == "pack") {
                    let bytes = std::fs::read(&path).unwrap();
                    packs.push((path, bytes));
                }
            }
        }
        packs.sort();
        packs
    };
    let before = packs(dir.path());

    let rotating = Arc::new(MasterKey::from_hex(&format!("{OTHER_KEY}\n{KEY}\n")).unwrap());
    let rotated = EngineConfig {
        master_key: Some(rotating),
        ..config(dir.path())
    };
    let engine = Engine::open(rotated).unwrap();
    read_all(&engine, acme, &payloads);
    engine.shutdown();
    assert_eq!(packs(dir.path()), before, "no payload is rewritten");
    let keyring = std::fs::read(dir.path().join("keyring")).unwrap();
    assert!(ctxstore_engine::seal::Keyring::decode(&keyring, &key_of(OTHER_KEY)).is_ok());
    assert!(ctxstore_engine::seal::Keyring::decode(&keyring, &key_of(KEY)).is_err());

    let refused = Engine::open(sealing(config(dir.path()), KEY)).unwrap_err();
    assert!(
        refused.to_string().contains("master-key check"),
        "{refused}"
    );
    let engine = Engine::open(sealing(config(dir.path()), OTHER_KEY)).unwrap();
    read_all(&engine, acme, &payloads);
    engine.shutdown();
    let report = verify_sealed(dir.path(), Some(key_of(OTHER_KEY))).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A crash between a deletion's two steps (decision 0032 §6): the keyring's tombstone is
/// durable, the tenant-deleted record is not. The next open finishes the deletion in the log;
/// the tenant's payloads never open again, and a reopen after that finds the record.
#[test]
fn a_crash_between_forgetting_the_keys_and_the_record_is_finished_at_open() {
    use ctxstore_engine::seal::Keyring;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    let (acme, context, payloads) = acme_with_payloads(&engine, 14);
    engine.shutdown();
    // Step 1 alone, as `StoreKeys::forget` writes it.
    let path = dir.path().join("keyring");
    let with_keys = std::fs::read(&path).unwrap();
    let mut keyring = Keyring::decode(&std::fs::read(&path).unwrap(), &key_of(KEY)).unwrap();
    keyring.delete(acme.0).unwrap();
    std::fs::write(&path, keyring.encode(&key_of(KEY)).unwrap()).unwrap();

    for _ in 0..2 {
        let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
        assert!(engine.tenant_deleted(acme) && !engine.tenant_ready(acme));
        let listed = engine.tenants();
        assert!(
            listed
                .iter()
                .any(|tenant| tenant.tenant_id == acme && tenant.deleted)
        );
        assert_eq!(
            engine.tenant_usage(acme).contexts,
            0,
            "its contexts are deleted"
        );
        let scoped = engine.scoped(acme);
        assert!(block_on(scoped.last(context, 1, true)).is_err());
        for payload in &payloads {
            assert!(block_on(scoped.blob(BlobHash::of(payload))).is_err());
        }
        engine.shutdown();
    }
    let report = verify_sealed(dir.path(), Some(key_of(KEY))).unwrap();
    assert!(report.is_ok(), "{report}");

    // The record is in the log now: even the keyring from before the deletion, put back,
    // brings nothing back, and the open destroys its keys again.
    std::fs::write(&path, &with_keys).unwrap();
    let engine = Engine::open(sealing(config(dir.path()), KEY)).unwrap();
    assert!(engine.tenant_deleted(acme) && !engine.tenant_ready(acme));
    assert_eq!(engine.tenant_usage(acme).contexts, 0);
    engine.shutdown();
    let keyring = Keyring::decode(&std::fs::read(&path).unwrap(), &key_of(KEY)).unwrap();
    assert!(matches!(
        keyring.tenant(acme.0),
        Some(ctxstore_engine::seal::TenantKeys::Deleted { .. })
    ));
}
