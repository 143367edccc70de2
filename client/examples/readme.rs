//! The Rust client snippets of README.md, compiled with the crate's tests (issue 29 item 5).
//! Each `// README:begin` … `// README:end` span is one ```rust block of the README, verbatim
//! (`cli/tests/readme_tour.rs` fails when they differ); what the README leaves to the reader
//! (a payload, a turn to patch) is set up around it. Against a fresh server it runs too:
//! `cargo run --example readme`, at `CTXSTORE_ADDR` (default 127.0.0.1:7411) as the CLI
//! (`client/tests/readme_example.rs` runs it so).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ctxstore_client::{BlobHash, Client, ClientError};

async fn basics() -> Result<Client, ClientError> {
    // README:begin
    use ctxstore_client::{Client, ClientConfig};
    let addr = std::env::var("CTXSTORE_ADDR").unwrap_or_else(|_| "127.0.0.1:7411".into());
    let client = Client::connect(ClientConfig::new(addr)).await?;
    let context = client.create_context().await?.context_id;
    let appended = client
        .append(context, None, 1, 1, bytes::Bytes::from_static(b"hi"))
        .await?;
    let page = client.last(context, 64, true).await?; // payloads checked (decision 0015)
    // README:end
    assert_eq!(
        page.turns.last().map(|turn| turn.turn_id),
        Some(appended.turn.turn_id)
    );
    Ok(client)
}

async fn agent_turns(client: &Client) -> Result<(), ClientError> {
    let payload = Bytes::from_static(b"{\"role\":\"user\",\"content\":\"plan a trip\"}");
    let other = Bytes::from_static(b"{\"role\":\"user\",\"content\":\"plan a trip to Oslo\"}");
    // README:begin
    use ctxstore_client::{ContextRef, NewContext, NewTurn, Parent};
    let named = NewContext {
        name: Some("run-42".into()),
        ..NewContext::default()
    };
    client.open_context(named).await?; // or ctxstore ctx create --name run-42
    let run = ContextRef::Name("run-42".into());
    let step = NewTurn::bytes(payload).key("step-1").label("run_id", "r42");
    let appended = client.append_turn(run.clone(), None, step).await?; // .existing on a retry
    let earlier = Parent::Turn(appended.turn.turn.turn_id);
    client
        .append_turn(run.clone(), None, NewTurn::bytes(other).parent(earlier))
        .await?;
    let labels = [("run_id".to_string(), "r42".to_string())];
    let log = client
        .turn_log_all(run.clone(), &labels, None, false)
        .await?; // every branch
    let window = client.window_all(run, None, true).await?; // from the latest summary turn
    // README:end
    assert_eq!(log.len(), 1);
    assert_eq!(window.len(), 2);
    Ok(())
}

async fn retention(client: &Client) -> Result<(), ClientError> {
    let chat = ctxstore_client::NewContext {
        name: Some("chat-7".into()),
        ..Default::default()
    };
    client.open_context(chat).await?;
    let backups = std::env::temp_dir().join(format!("ctxstore-readme-{}", std::process::id()));
    let backup_dir = backups.join("ctxstore-2026-11-23");
    let backup_dir = backup_dir.to_str().unwrap();
    // README:begin
    use ctxstore_client::ContextRef;
    use std::time::Duration;
    let thread = ContextRef::Name("chat-7".into());
    let pruned = client.prune_context(thread.clone(), 100).await?; // .floor_depth
    let week = Some(Duration::from_secs(7 * 24 * 3600));
    let kept = client.set_context_ttl(thread.clone(), week).await?; // .ttl_ms == Some(604_800_000)
    let now = client.context_retention(thread.clone()).await?; // reads, changes nothing
    client.delete_context(thread).await?; // the context as it was
    // A directory on the server's host; waits up to ClientConfig::backup_timeout (24 h).
    let report = client.backup(backup_dir).await?; // e.g. "/var/backups/ctxstore-2026-11-23"
    // A garbage collection now; waits up to ClientConfig::gc_timeout (1 h).
    let gc = client.gc().await?; // .turns_dead, .bytes_reclaimed
    let stats = client.stats().await?; // .gc_runs: Some(1) (None: server without GC)
    // README:end
    assert_eq!(pruned.floor_depth, 0);
    assert_eq!(kept.ttl_ms, Some(604_800_000));
    assert_eq!(now.ttl_ms, kept.ttl_ms);
    assert!(report.turns > 0 && gc.duration_ms < 3_600_000);
    assert!(stats.gc_runs.is_some());
    let _ = std::fs::remove_dir_all(backups);
    Ok(())
}

async fn overlays(client: &Client) -> Result<(), ClientError> {
    let context = client.create_context().await?.context_id;
    let answer = Bytes::from_static(b"the wrong answer");
    let turn_id = client
        .append(context, None, 1, 1, answer)
        .await?
        .turn
        .turn_id;
    let secret = Bytes::from_static(b"a secret the user asked to erase");
    let other = client.append(context, None, 1, 1, secret.clone()).await?;
    let other_turn_id = other.turn.turn_id;
    let hash = BlobHash::of(&secret);
    let fixed_bytes = Bytes::from_static(b"the corrected answer");
    // README:begin
    let patched = client.patch_turn(turn_id, fixed_bytes).await?; // .overlay_seq, .payload_hash
    client.redact_turn(other_turn_id).await?; // final; a second one is INVALID_ARGUMENT
    let purged = client.purge_blob(hash).await?; // .turns_redacted; then client.gc()
    let view = client.as_of(0); // reads in the latest overlay view: turns carry
    let page = view.last(context, 64, true).await?; // .redacted and .overlay_seq
    let older = client.as_of(patched.overlay_seq - 1).turn(turn_id).await?; // before the patch
    // README:end
    assert_eq!(purged.turns_redacted, 0, "the redaction came first");
    assert!(page.turns[1].redacted);
    assert_eq!(older.payload_len, 16);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let client = basics().await?;
    agent_turns(&client).await?;
    retention(&client).await?;
    overlays(&client).await?;
    println!("every README snippet ran");
    Ok(())
}
