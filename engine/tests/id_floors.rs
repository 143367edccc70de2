//! Ids unique across replica generations (issue 46 item 8, `engine/src/engine/id_floors.rs`):
//! a raised floor is where the next TurnID and ContextID start, the ids skipped read as not
//! found, the floors survive a reopen and a further log compaction, and a primary hands out
//! no id more than the bound past what its replica holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{append, block_on, gc_config, new_context, open};
use ctxstore_engine::id_floors::{IDS_UNSHIPPED_CONTEXTS_MAX, IDS_UNSHIPPED_RECORDS_MAX, IdFloors};
use ctxstore_engine::{ContextId, Engine, EngineError, ErrorKind, TurnId, verify};

fn context_exists(engine: &Engine, context: ContextId) -> bool {
    match block_on(engine.head(context)) {
        Ok(_) => true,
        Err(EngineError::ContextNotFound(_)) => false,
        Err(error) => panic!("head of {context}: {error}"),
    }
}

#[test]
fn a_raised_floor_is_where_the_next_ids_start_and_it_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let first = new_context(&engine);
    let old_turn = append(&engine, first, b"before the floor", None)
        .unwrap()
        .turn
        .turn_id;
    let before = engine.id_floors();
    assert_eq!(before.contexts, 2);

    let floors = IdFloors {
        records: 5_000,
        contexts: 700,
    };
    block_on(engine.raise_id_floors(floors)).unwrap();
    // The skip record takes record 5,000; the next turn comes after it.
    let context = new_context(&engine);
    assert_eq!(context, ContextId(700));
    let turn = append(&engine, context, b"after the floor", None)
        .unwrap()
        .turn;
    assert!(
        turn.turn_id.0 > 5_000,
        "turn {} below the floor",
        turn.turn_id
    );
    // Skipped ids read as ids that never were.
    for skipped in [2, 350, 699] {
        assert!(
            !context_exists(&engine, ContextId(skipped)),
            "context {skipped}"
        );
    }
    assert!(block_on(engine.turn(TurnId(4_000))).is_err());
    assert_eq!(block_on(engine.turn(old_turn)).unwrap().turn_id, old_turn);
    // Raising again to lower floors changes nothing.
    block_on(engine.raise_id_floors(IdFloors {
        records: 10,
        contexts: 3,
    }))
    .unwrap();
    let now = engine.id_floors();
    engine.shutdown();
    drop(engine);

    let engine = open(dir.path());
    assert_eq!(engine.id_floors(), now, "the floors survive a reopen");
    let again = new_context(&engine);
    assert_eq!(again, ContextId(701));
    let later = append(&engine, context, b"after the reopen", None)
        .unwrap()
        .turn;
    assert!(later.turn_id > turn.turn_id);
    assert!(context_exists(&engine, first) && !context_exists(&engine, ContextId(699)));
    // Skipped ids are neither live nor deleted contexts.
    assert_eq!(engine.stats().contexts, 3);
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        (
            report.contexts,
            report.contexts_deleted,
            report.contexts_skipped
        ),
        (3, 0, 698),
        "{report}"
    );
    assert!(report.to_string().contains("698 ids skipped"), "{report}");
}

#[test]
fn a_compaction_after_a_floor_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let kept = new_context(&engine);
    append(&engine, kept, b"kept", None).unwrap();
    block_on(engine.raise_id_floors(IdFloors {
        records: 3_000,
        contexts: 40,
    }))
    .unwrap();
    let doomed = new_context(&engine);
    for i in 0..20u32 {
        append(&engine, doomed, &i.to_le_bytes().repeat(300), None).unwrap();
    }
    block_on(engine.delete_context(&ctxstore_engine::ContextRef::Id(doomed))).unwrap();
    let round = engine.gc().unwrap();
    assert!(round.log_bytes_reclaimed > 0, "{round:?}");
    let floors = engine.id_floors();
    engine.shutdown();
    drop(engine);
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert_eq!(engine.id_floors(), floors);
    assert_eq!(new_context(&engine).0, floors.contexts);
    assert!(context_exists(&engine, kept));
}

#[test]
fn a_primary_hands_out_no_id_past_the_bound_until_more_has_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    // Ids far enough up that the bound can be reached in a few appends.
    block_on(engine.raise_id_floors(IdFloors {
        records: IDS_UNSHIPPED_RECORDS_MAX + 10,
        contexts: IDS_UNSHIPPED_CONTEXTS_MAX + 10,
    }))
    .unwrap();
    let context = new_context(&engine);
    append(&engine, context, b"one", None).unwrap();
    let next = engine.id_floors();
    // The replica holds records up to two before the bound: two appends, then a refusal.
    let shipped = next.records + 1 - IDS_UNSHIPPED_RECORDS_MAX;
    engine.set_shipped_ids(shipped, next.contexts);
    let mut taken = 0;
    let refusal = loop {
        match append(&engine, context, b"more", None) {
            Ok(_) => taken += 1,
            Err(error) => break error,
        }
        assert!(taken < 10, "the bound never refused");
    };
    assert_eq!(refusal.kind(), ErrorKind::ReadOnly, "{refusal}");
    assert!(
        refusal.to_string().contains("retry once more has shipped"),
        "{refusal}"
    );
    assert!(engine.id_floors().records <= shipped + IDS_UNSHIPPED_RECORDS_MAX + 1);
    // More shipped: writes go on. No replica: no bound.
    engine.set_shipped_ids(engine.id_floors().records, next.contexts);
    append(&engine, context, b"again", None).unwrap();
    engine.set_shipped_ids(u64::MAX, u64::MAX);
    append(&engine, context, b"unbounded", None).unwrap();

    // ContextIDs: past the bound, creating one is refused, appending is not.
    let count = engine.id_floors().contexts - 1;
    engine.set_shipped_ids(u64::MAX, count - IDS_UNSHIPPED_CONTEXTS_MAX);
    let refused = block_on(engine.create(ctxstore_engine::NewContext::default())).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ReadOnly, "{refused}");
    append(&engine, context, b"appends still go", None).unwrap();
    engine.set_shipped_ids(u64::MAX, count);
    new_context(&engine);
}
