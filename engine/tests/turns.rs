//! Turns for agent frameworks (issue 14, decision 0009): explicit parents, keys (idempotent
//! retries), labels, links, summaries and the window, the turn log across branches and
//! inheritance, reopen, and a torn turn-with-extras at the end of the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{block_on, open};
use ctxstore_engine::turns::{LogQuery, TurnLogPage};
use ctxstore_engine::{
    AppendPayload, AppendRequest, Appended, ContextId, ContextRef, Engine, EngineError, ErrorKind,
    NewContext, NoPayloadCache, PageOptions, Parent, TurnId, TurnOptions, verify,
};

fn add(engine: &Engine, context: ContextId, payload: &str, options: TurnOptions) -> Appended {
    try_add(engine, context, payload, options).unwrap()
}

fn try_add(
    engine: &Engine,
    context: ContextId,
    payload: &str,
    options: TurnOptions,
) -> Result<Appended, EngineError> {
    block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::from(payload.to_string())),
        options,
    }))
}

fn keyed(key: &str, labels: &[(&str, &str)]) -> TurnOptions {
    TurnOptions {
        key: (!key.is_empty()).then(|| Bytes::from(key.to_string())),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..TurnOptions::default()
    }
}

fn log(engine: &Engine, context: ContextId, labels: &[(&str, &str)]) -> Vec<TurnId> {
    let mut all = Vec::new();
    let mut query = LogQuery {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cursor: None,
        limit: 2,
        payload_bytes_max: 0,
        as_of: None,
    };
    loop {
        let TurnLogPage { turns, next_cursor } =
            engine.turn_log(&ContextRef::Id(context), &query).unwrap();
        all.extend(turns.iter().map(|t| t.turn.turn_id));
        match next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => return all,
        }
    }
}

#[test]
fn explicit_parents_keys_labels_links_and_the_turn_log() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = block_on(engine.create_context()).unwrap().context_id;
    let a = add(&engine, thread, "a", keyed("cp-a", &[("step", "1")]));
    let b = add(&engine, thread, "b", keyed("cp-b", &[("step", "2")]));
    let c = add(&engine, thread, "c", keyed("cp-c", &[("step", "3")]));
    assert_eq!((a.turn.depth, b.turn.depth, c.turn.depth), (0, 1, 2));
    assert_eq!(a.extras.labels, [("step".to_string(), "1".to_string())]);

    // Time travel: a new turn after `a`, in the same context; the head moves to it.
    let fork_options = TurnOptions {
        parent: Parent::Turn(a.turn.turn_id),
        ..keyed("cp-d", &[("step", "2"), ("source", "update")])
    };
    let d = add(&engine, thread, "d", fork_options);
    assert_eq!((d.turn.parent_turn_id, d.turn.depth), (a.turn.turn_id, 1));
    assert_eq!(
        block_on(engine.head(thread)).unwrap().head_turn_id,
        d.turn.turn_id
    );

    // A retried append with a key answers the turn it made, and stores nothing.
    let turns_before = engine.stats().turns;
    let again = add(&engine, thread, "b again", keyed("cp-b", &[]));
    assert!(again.existing);
    assert_eq!(again.turn.turn_id, b.turn.turn_id);
    assert_eq!(engine.stats().turns, turns_before);

    // Look-up by key; the log across both branches, newest first, and filtered by label.
    let by_key = engine
        .turn_by_key(&ContextRef::Id(thread), b"cp-c")
        .unwrap();
    assert_eq!(by_key.unwrap().turn.turn_id, c.turn.turn_id);
    assert!(
        engine
            .turn_by_key(&ContextRef::Id(thread), b"nope")
            .unwrap()
            .is_none()
    );
    let ids = |turns: &[&Appended]| turns.iter().map(|t| t.turn.turn_id).collect::<Vec<_>>();
    assert_eq!(log(&engine, thread, &[]), ids(&[&d, &c, &b, &a]));
    assert_eq!(log(&engine, thread, &[("step", "2")]), ids(&[&d, &b]));
    assert_eq!(
        log(&engine, thread, &[("step", "2"), ("source", "update")]),
        ids(&[&d])
    );

    // A parent the context does not own is refused, and nothing is written.
    let other = block_on(engine.create_context()).unwrap().context_id;
    let x = add(&engine, other, "x", TurnOptions::default());
    let foreign = TurnOptions {
        parent: Parent::Turn(x.turn.turn_id),
        ..TurnOptions::default()
    };
    let error = try_add(&engine, thread, "e", foreign).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert_eq!(
        block_on(engine.head(thread)).unwrap().head_turn_id,
        d.turn.turn_id
    );

    // Links to existing turns of any context; a missing one is NOT_FOUND.
    let linked = TurnOptions {
        links: vec![x.turn.turn_id],
        ..TurnOptions::default()
    };
    let e = add(&engine, thread, "e", linked);
    assert_eq!(
        engine.turn_extras(e.turn.turn_id).unwrap().links,
        [x.turn.turn_id]
    );
    let missing = TurnOptions {
        links: vec![TurnId(999_999)],
        ..TurnOptions::default()
    };
    let error = try_add(&engine, thread, "f", missing).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);

    // Limits name themselves.
    let long_key = keyed(&"k".repeat(65), &[]);
    let error = try_add(&engine, thread, "g", long_key).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");
    let many_labels: Vec<(String, String)> =
        (0..17).map(|i| (format!("l{i}"), "v".into())).collect();
    let error = try_add(
        &engine,
        thread,
        "h",
        TurnOptions {
            labels: many_labels,
            ..TurnOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");

    // A new root in the context.
    let root = add(
        &engine,
        thread,
        "root",
        TurnOptions {
            parent: Parent::Root,
            ..TurnOptions::default()
        },
    );
    assert_eq!(
        (root.turn.parent_turn_id, root.turn.depth),
        (TurnId::NONE, 0)
    );

    // Forks and clones inherit: keys are found through them, the log continues into them,
    // and their parent choices may name inherited turns.
    let fork = block_on(engine.fork(c.turn.turn_id)).unwrap().context_id;
    let in_fork = engine.turn_by_key(&ContextRef::Id(fork), b"cp-b").unwrap();
    assert_eq!(in_fork.unwrap().turn.turn_id, b.turn.turn_id);
    assert!(
        engine
            .turn_by_key(&ContextRef::Id(fork), b"cp-d")
            .unwrap()
            .is_none(),
        "d is not on the fork's base chain"
    );
    assert_eq!(log(&engine, fork, &[]), ids(&[&c, &b, &a]));
    let f = add(
        &engine,
        fork,
        "f",
        TurnOptions {
            parent: Parent::Turn(b.turn.turn_id),
            ..keyed("cp-b", &[])
        },
    );
    assert!(f.existing, "the fork inherited the key");
    let clone = block_on(engine.create(NewContext {
        clone_from: Some(ContextRef::Id(thread)),
        name: Some("copy".into()),
        ..NewContext::default()
    }))
    .unwrap()
    .context
    .head
    .context_id;
    let mut all_of_thread = log(&engine, thread, &[]);
    assert_eq!(log(&engine, clone, &[]), all_of_thread);
    let g = add(
        &engine,
        clone,
        "g",
        TurnOptions {
            parent: Parent::Turn(c.turn.turn_id),
            ..keyed("cp-g", &[])
        },
    );
    assert!(!g.existing);
    all_of_thread.insert(0, g.turn.turn_id);
    assert_eq!(log(&engine, clone, &[]), all_of_thread);
    assert!(
        engine
            .turn_by_key(&ContextRef::Id(thread), b"cp-g")
            .unwrap()
            .is_none(),
        "a clone's turns are its own"
    );

    // Everything survives a reopen, and the store verifies.
    let thread_log = log(&engine, thread, &[]);
    let clone_log = log(&engine, clone, &[]);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
    let engine = open(dir.path());
    assert_eq!(log(&engine, thread, &[]), thread_log);
    assert_eq!(log(&engine, clone, &[]), clone_log);
    let again = add(&engine, thread, "b", keyed("cp-b", &[]));
    assert!(again.existing && again.turn.turn_id == b.turn.turn_id);
    assert_eq!(
        engine.turn_extras(e.turn.turn_id).unwrap().links,
        [x.turn.turn_id]
    );
}

#[test]
fn the_window_starts_at_the_latest_summary() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = block_on(engine.create_context()).unwrap().context_id;
    let window = |engine: &Engine, limit| -> Vec<u32> {
        let page = engine
            .window(
                &ContextRef::Id(thread),
                limit,
                PageOptions::TURNS,
                &mut NoPayloadCache,
            )
            .unwrap();
        page.entries.iter().map(|entry| entry.turn.depth).collect()
    };
    for depth in 0..5 {
        add(
            &engine,
            thread,
            &format!("turn {depth}"),
            TurnOptions::default(),
        );
    }
    assert_eq!(
        window(&engine, 100),
        [0, 1, 2, 3, 4],
        "no summary: the whole chain"
    );
    let summary = TurnOptions {
        summary: true,
        ..TurnOptions::default()
    };
    let s = add(&engine, thread, "summary of 0..=4", summary);
    assert!(s.turn.is_summary());
    assert_eq!(s.turn.summary_turn_id, s.turn.turn_id);
    for depth in 6..9 {
        let t = add(
            &engine,
            thread,
            &format!("turn {depth}"),
            TurnOptions::default(),
        );
        assert_eq!(t.turn.summary_turn_id, s.turn.turn_id);
    }
    assert_eq!(window(&engine, 100), [5, 6, 7, 8]);
    assert_eq!(window(&engine, 2), [7, 8], "the newest of the window");
    engine.shutdown();
    let engine = open(dir.path());
    assert_eq!(window(&engine, 100), [5, 6, 7, 8]);
}

#[test]
fn a_turn_with_extras_cut_anywhere_at_the_end_of_the_log_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = block_on(engine.create_context()).unwrap().context_id;
    add(&engine, thread, "first", TurnOptions::default());
    engine.shutdown();
    let log_path = dir.path().join("turns.log");
    let records = |bytes: &[u8]| {
        bytes
            .chunks(128)
            .take_while(|slot| slot.iter().any(|&b| b != 0))
            .count() as u64
    };
    let durable = records(&std::fs::read(&log_path).unwrap());
    // A turn whose labels take several continuation slots.
    let engine = open(dir.path());
    let heavy = keyed("heavy", &[("note", &"n".repeat(900))]);
    let turn = add(&engine, thread, "second", heavy);
    engine.shutdown();
    let full = std::fs::read(&log_path).unwrap();
    let slots = records(&full) - durable;
    assert!(slots > 5, "{slots} slots");
    for kept in 1..slots {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        let cut = ((durable + kept) * 128) as usize;
        std::fs::write(copy.path().join("turns.log"), &full[..cut]).unwrap();
        let report = verify(copy.path()).unwrap();
        assert!(report.is_ok(), "{report}");
        let engine = open(copy.path());
        let head = block_on(engine.head(thread)).unwrap();
        assert_eq!(
            head.head_depth, 0,
            "a partial turn was applied (kept {kept})"
        );
        assert!(
            engine
                .turn_by_key(&ContextRef::Id(thread), b"heavy")
                .unwrap()
                .is_none()
        );
        // The store goes on, and the key can be used again.
        let redo = add(&engine, thread, "second", keyed("heavy", &[]));
        assert!(!redo.existing);
        engine.shutdown();
        assert!(verify(copy.path()).unwrap().is_ok());
    }
    let engine = open(dir.path());
    let found = engine
        .turn_by_key(&ContextRef::Id(thread), b"heavy")
        .unwrap();
    assert_eq!(found.unwrap().turn.turn_id, turn.turn.turn_id);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_batch_append_lands_in_order_all_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = block_on(engine.create_context()).unwrap().context_id;
    let first = add(&engine, thread, "prompt", TurnOptions::default());
    let request =
        |payload: &str, options: TurnOptions, expected_head: Option<TurnId>| AppendRequest {
            context_id: thread,
            expected_head,
            type_tag: 1,
            codec: 0,
            payload: AppendPayload::Bytes(Bytes::from(payload.to_string())),
            options,
        };
    let step = vec![
        request("tool call", keyed("s1-call", &[]), Some(first.turn.turn_id)),
        request("tool result", TurnOptions::default(), None),
        request("message", keyed("s1-msg", &[("role", "assistant")]), None),
    ];
    let appended = block_on(engine.append_batch(step)).unwrap();
    let depths: Vec<u32> = appended.iter().map(|a| a.turn.depth).collect();
    assert_eq!(depths, [1, 2, 3]);
    for pair in appended.windows(2) {
        assert_eq!(pair[1].turn.parent_turn_id, pair[0].turn.turn_id);
    }
    let head = block_on(engine.head(thread)).unwrap();
    assert_eq!(head.head_turn_id, appended[2].turn.turn_id);

    // One refused turn refuses the batch: nothing of it is written.
    let turns_before = engine.stats().turns;
    let bad = vec![
        request("fine", TurnOptions::default(), None),
        request("too long a key", keyed(&"k".repeat(65), &[]), None),
    ];
    let error = block_on(engine.append_batch(bad)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge);
    assert_eq!(engine.stats().turns, turns_before);
    assert_eq!(block_on(engine.head(thread)).unwrap(), head);
    // A stale expected head refuses it too.
    let stale = vec![request(
        "late",
        TurnOptions::default(),
        Some(first.turn.turn_id),
    )];
    let error = block_on(engine.append_batch(stale)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict);

    // A retried batch answers the keyed turns it made.
    let retry = vec![request("tool call", keyed("s1-call", &[]), None)];
    let again = block_on(engine.append_batch(retry)).unwrap();
    assert!(again[0].existing);
    assert_eq!(again[0].turn.turn_id, appended[0].turn.turn_id);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn a_clone_of_a_clone_without_turns_of_its_own_inherits_the_first_sources_keys() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let first = block_on(engine.create_context()).unwrap().context_id;
    let keyed_turn = add(&engine, first, "checkpoint", keyed("cp", &[]));
    let clone_of = |source: ContextId, name: &str| {
        block_on(engine.create(NewContext {
            clone_from: Some(ContextRef::Id(source)),
            name: Some(name.into()),
            ..NewContext::default()
        }))
        .unwrap()
        .context
        .head
        .context_id
    };
    let middle = clone_of(first, "middle");
    let last = clone_of(middle, "last");
    for context in [middle, last] {
        let found = engine.turn_by_key(&ContextRef::Id(context), b"cp").unwrap();
        assert_eq!(found.unwrap().turn.turn_id, keyed_turn.turn.turn_id);
        assert_eq!(log(&engine, context, &[]), [keyed_turn.turn.turn_id]);
    }
    // A turn of the first source after the clones is not theirs.
    add(&engine, first, "later", keyed("cp-later", &[]));
    assert!(
        engine
            .turn_by_key(&ContextRef::Id(last), b"cp-later")
            .unwrap()
            .is_none()
    );
}

#[test]
fn in_a_batch_a_new_turn_after_an_existing_one_hangs_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = block_on(engine.create_context()).unwrap().context_id;
    let k1 = add(&engine, thread, "k1", keyed("k1", &[]));
    add(&engine, thread, "two", TurnOptions::default());
    add(&engine, thread, "three", TurnOptions::default());
    let request = |payload: &str, options: TurnOptions| AppendRequest {
        context_id: thread,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::from(payload.to_string())),
        options,
    };
    let batch = vec![
        request("k1 again", keyed("k1", &[])),
        request("after k1", TurnOptions::default()),
    ];
    let appended = block_on(engine.append_batch(batch)).unwrap();
    assert!(appended[0].existing);
    assert_eq!(appended[1].turn.parent_turn_id, k1.turn.turn_id);
    assert_eq!(appended[1].turn.depth, 1);
}

/// What the model knows of a turn.
#[derive(Clone, Debug)]
struct ModelTurn {
    id: TurnId,
    depth: u32,
    key: Option<u8>,
    summary: TurnId,
    /// Its labels, sorted by key (`idx.step` is indexed store-wide, `color` is not).
    labels: Vec<(String, String)>,
    links: Vec<TurnId>,
}

#[derive(Clone, Debug)]
enum Op {
    /// Append with a parent choice (0 head, 1 root, else an earlier turn by index), maybe a
    /// key from a small set (retries happen), maybe a summary, labels from small sets
    /// (`step`: indexed, `color`: filtered), maybe a link to an earlier turn by index.
    Append {
        parent: (u8, usize),
        key: Option<u8>,
        summary: bool,
        labels: (Option<u8>, Option<u8>),
        link: Option<usize>,
    },
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let labels = (proptest::option::of(0..3u8), proptest::option::of(0..2u8));
    prop_oneof![
        8 => (
            (0..4u8, any::<usize>()),
            proptest::option::of(0..6u8),
            proptest::bool::weighted(0.15),
            labels,
            proptest::option::weighted(0.2, any::<usize>()),
        )
            .prop_map(|(parent, key, summary, labels, link)| Op::Append {
                parent,
                key,
                summary,
                labels,
                link,
            }),
        1 => Just(Op::Reopen),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Explicit parents, keys with retries, summaries, labels, links and reopen against a
    /// model: heads, depths, look-ups by key, each turn's labels and links, the turn log
    /// (whole and filtered by a label), the store-wide find and the window agree after every
    /// step.
    #[test]
    fn turns_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = open(dir.path());
        let thread = block_on(engine.create_context()).unwrap().context_id;
        let mut turns: Vec<ModelTurn> = Vec::new();
        let mut head: Option<usize> = None;
        for op in ops {
            match op {
                Op::Reopen => {
                    engine.shutdown();
                    engine = open(dir.path());
                }
                Op::Append { parent, key, summary, labels, link } => {
                    let existing = key.and_then(|k| turns.iter().position(|t| t.key == Some(k)));
                    let parent_index = match parent.0 {
                        0 => head,
                        1 => None,
                        _ if turns.is_empty() => head,
                        _ => Some(parent.1 % turns.len()),
                    };
                    let choice = match (parent.0, parent_index) {
                        (0, _) => Parent::Head,
                        (1, _) => Parent::Root,
                        (_, Some(index)) => Parent::Turn(turns[index].id),
                        (_, None) => Parent::Head,
                    };
                    let mut label_pairs: Vec<(String, String)> = Vec::new();
                    if let Some(color) = labels.1 {
                        label_pairs.push(("color".into(), format!("c{color}")));
                    }
                    if let Some(step) = labels.0 {
                        label_pairs.push(("idx.step".into(), format!("s{step}")));
                    }
                    let links: Vec<TurnId> = match link {
                        Some(index) if !turns.is_empty() => vec![turns[index % turns.len()].id],
                        _ => Vec::new(),
                    };
                    let options = TurnOptions {
                        parent: choice,
                        key: key.map(|k| Bytes::from(vec![b'k', k])),
                        summary,
                        labels: label_pairs.clone(),
                        links: links.clone(),
                        vectors: None,
                    };
                    let appended = add(&engine, thread, "payload", options);
                    if let Some(index) = existing {
                        proptest::prop_assert!(appended.existing);
                        proptest::prop_assert_eq!(appended.turn.turn_id, turns[index].id);
                        continue;
                    }
                    proptest::prop_assert!(!appended.existing);
                    let parent = parent_index.map(|index| turns[index].clone());
                    let depth = parent.as_ref().map_or(0, |p| p.depth + 1);
                    proptest::prop_assert_eq!(appended.turn.depth, depth);
                    proptest::prop_assert_eq!(
                        appended.turn.parent_turn_id,
                        parent.as_ref().map_or(TurnId::NONE, |p| p.id)
                    );
                    let summary_id = if summary {
                        appended.turn.turn_id
                    } else {
                        parent.as_ref().map_or(TurnId::NONE, |p| p.summary)
                    };
                    proptest::prop_assert_eq!(appended.turn.summary_turn_id, summary_id);
                    turns.push(ModelTurn {
                        id: appended.turn.turn_id,
                        depth,
                        key,
                        summary: summary_id,
                        labels: label_pairs,
                        links,
                    });
                    head = Some(turns.len() - 1);
                }
            }
            // The head, every key, the log (newest first) and the window agree.
            let head_now = block_on(engine.head(thread)).unwrap();
            proptest::prop_assert_eq!(
                head_now.head_turn_id,
                head.map_or(TurnId::NONE, |index| turns[index].id)
            );
            for turn in &turns {
                if let Some(k) = turn.key {
                    let found = engine.turn_by_key(&ContextRef::Id(thread), &[b'k', k]).unwrap();
                    proptest::prop_assert_eq!(found.map(|t| t.turn.turn_id), Some(turn.id));
                }
            }
            let expected_log: Vec<TurnId> = turns.iter().rev().map(|t| t.id).collect();
            proptest::prop_assert_eq!(log(&engine, thread, &[]), expected_log);
            for turn in &turns {
                let extras = engine.turn_extras(turn.id).unwrap();
                proptest::prop_assert_eq!(&extras.labels, &turn.labels, "turn {}", turn.id);
                proptest::prop_assert_eq!(&extras.links, &turn.links, "turn {}", turn.id);
            }
            let carrying = |key: &str, value: &str| -> Vec<TurnId> {
                turns
                    .iter()
                    .rev()
                    .filter(|t| t.labels.iter().any(|(k, v)| k == key && v == value))
                    .map(|t| t.id)
                    .collect()
            };
            for color in ["c0", "c1"] {
                proptest::prop_assert_eq!(
                    log(&engine, thread, &[("color", color)]),
                    carrying("color", color)
                );
            }
            for step in ["s0", "s1", "s2"] {
                let mut found = Vec::new();
                let mut before = TurnId::NONE;
                loop {
                    let page = engine.find_turns("idx.step", step, before, 3).unwrap();
                    found.extend(page.turns.iter().map(|t| t.turn.turn_id));
                    if page.next_before.is_none() {
                        break;
                    }
                    before = page.next_before;
                }
                proptest::prop_assert_eq!(found, carrying("idx.step", step));
                // Two labels in one filter: a conjunction.
                proptest::prop_assert_eq!(
                    log(&engine, thread, &[("idx.step", step), ("color", "c1")]),
                    turns
                        .iter()
                        .rev()
                        .filter(|t| t.labels.contains(&("idx.step".into(), step.into()))
                            && t.labels.contains(&("color".into(), "c1".into())))
                        .map(|t| t.id)
                        .collect::<Vec<_>>()
                );
            }
            if let Some(index) = head {
                let tip = &turns[index];
                let start_depth = turns
                    .iter()
                    .find(|t| t.id == tip.summary)
                    .map_or(0, |s| s.depth);
                let page = engine
                    .window(&ContextRef::Id(thread), 1000, PageOptions::TURNS, &mut NoPayloadCache)
                    .unwrap();
                let depths: Vec<u32> = page.entries.iter().map(|e| e.turn.depth).collect();
                let expected: Vec<u32> = (start_depth..=tip.depth).collect();
                proptest::prop_assert_eq!(depths, expected);
            }
        }
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        proptest::prop_assert!(report.is_ok(), "{}", report);
    }
}

#[test]
fn turns_are_found_store_wide_by_an_indexed_label() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mut expected = Vec::new();
    for thread in 0..3 {
        let context = block_on(engine.create_context()).unwrap().context_id;
        for step in 0..4 {
            let run = if step % 2 == 0 { "run-a" } else { "run-b" };
            let labels = [("run_id", run), ("step", "x")];
            let turn = add(
                &engine,
                context,
                &format!("{thread}/{step}"),
                keyed("", &labels),
            );
            if run == "run-a" {
                expected.push(turn.turn.turn_id);
            }
        }
    }
    expected.reverse();
    let find_all = |engine: &Engine| {
        let mut all = Vec::new();
        let mut before = TurnId::NONE;
        loop {
            let page = engine.find_turns("run_id", "run-a", before, 4).unwrap();
            all.extend(page.turns.iter().map(|turn| turn.turn.turn_id));
            if page.next_before.is_none() {
                return all;
            }
            before = page.next_before;
        }
    };
    assert_eq!(find_all(&engine), expected);
    let error = engine
        .find_turns("step", "x", TurnId::NONE, 10)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    engine.shutdown();
    let engine = open(dir.path());
    assert_eq!(find_all(&engine), expected, "the index is rebuilt at open");
}

#[test]
fn a_crafted_turn_log_cursor_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mine = block_on(engine.create_context()).unwrap().context_id;
    let other = block_on(engine.create_context()).unwrap().context_id;
    add(&engine, mine, "mine", TurnOptions::default());
    let theirs = add(&engine, other, "theirs", TurnOptions::default());
    for cursor in [
        // Another context's turn, a phase this context does not have, a turn that is none.
        ctxstore_engine::turns::LogCursor {
            phase: 0,
            next: theirs.turn.turn_id,
        },
        ctxstore_engine::turns::LogCursor {
            phase: 7,
            next: theirs.turn.turn_id,
        },
        ctxstore_engine::turns::LogCursor {
            phase: 0,
            next: TurnId(1 << 40),
        },
    ] {
        let query = LogQuery {
            labels: Vec::new(),
            cursor: Some(cursor),
            limit: 10,
            payload_bytes_max: 0,
            as_of: None,
        };
        let error = engine.turn_log(&ContextRef::Id(mine), &query).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
}

/// Depth windows go down skip pointers through the readers' skip cache (`TurnsView::ancestor`):
/// on chains a few thousand deep, with forks hanging off them and appended to, every window's
/// first turn is the one the parent walk from the head reaches, read cold and again warm.
#[test]
fn depth_windows_of_deep_forked_chains_match_the_parent_walk() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let batch = |context: ContextId, start: usize| -> Vec<AppendRequest> {
        (0..64)
            .map(|i| AppendRequest {
                context_id: context,
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload: AppendPayload::Bytes(Bytes::from(format!("turn {context} {}", start + i))),
                options: TurnOptions::default(),
            })
            .collect()
    };
    let main = block_on(engine.create_context()).unwrap().context_id;
    let mut contexts = vec![main];
    let mut rng = fastrand::Rng::with_seed(14);
    for round in 0..48 {
        let context = contexts[rng.usize(..contexts.len())];
        let appended = block_on(engine.append_batch(batch(context, round * 64))).unwrap();
        if round % 8 == 7 {
            let base = appended[rng.usize(..appended.len())].turn.turn_id;
            contexts.push(block_on(engine.fork(base)).unwrap().context_id);
        }
    }
    for pass in ["cold", "warm"] {
        let mut rng = fastrand::Rng::with_seed(7);
        for context in &contexts {
            let head = block_on(engine.head(*context)).unwrap();
            let mut walk = vec![block_on(engine.turn(head.head_turn_id)).unwrap()];
            while walk.last().unwrap().depth > 0 {
                let parent = walk.last().unwrap().parent_turn_id;
                walk.push(block_on(engine.turn(parent)).unwrap());
            }
            for _ in 0..40 {
                let depth = rng.u32(0..=walk[0].depth);
                let window = block_on(engine.range_by_depth(*context, depth, 2, false)).unwrap();
                let expected = walk.iter().find(|turn| turn.depth == depth).unwrap();
                assert_eq!(
                    window[0].turn.turn_id, expected.turn_id,
                    "{pass} read, depth {depth}"
                );
            }
        }
    }
}
