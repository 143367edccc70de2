//! The in-process engine snippet of README.md, compiled with the crate's tests (issue 29 item
//! 5): the `// README:begin` … `// README:end` span is the README's ```rust block, verbatim
//! (`client/tests/readme_tour.rs` fails when they differ). `cargo run --example readme_engine -p
//! ctxstore-engine` runs it on a temporary directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::env::set_current_dir(dir.path())?;
    pollster::block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // README:begin
    use bytes::Bytes;
    use ctxstore_engine::{AppendPayload, AppendRequest, Engine, EngineConfig};

    let engine = Engine::open(EngineConfig::new("./ctxstore-data"))?; // recovers, starts actors
    let context = engine.create_context().await?.context_id;
    let appended = engine
        .append(AppendRequest {
            context_id: context,
            expected_head: None, // Some(turn) for compare-and-set on the head
            type_tag: 1,         // yours: what the payload is
            codec: 1,            // yours: how it is serialised
            payload: AppendPayload::Bytes(Bytes::from_static(b"{\"role\":\"user\"}")),
            options: Default::default(), // parent, key, labels, links, summary (turns for agents)
        })
        .await?; // durable when this returns
    let fork = engine.fork(appended.turn.turn_id).await?; // O(1), copies nothing
    let page = engine.last(context, 64, true).await?; // oldest first, with payloads
    engine.shutdown();
    // README:end
    assert_eq!(page.turns.len(), 1);
    assert_eq!(fork.head_turn_id, appended.turn.turn_id);
    println!("the README's engine snippet ran");
    Ok(())
}
