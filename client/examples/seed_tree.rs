//! Seeds a context shaped like an agent's history, for the web console's browser tests and
//! its page-load figure (issue 37, benches/results/HISTORY.md): TURNS turns of JSON messages, a new
//! branch off an older turn every BRANCH_EVERY turns (a retry or a time travel), appended in
//! batches of 64. Prints `{"context_id":N,"head_turn_id":T,"turns":TURNS}`.
//!
//! `cargo run --example seed_tree -- ADDR NAME TURNS BRANCH_EVERY`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ctxstore_client::{Client, ClientConfig, NewContext, NewTurn, Parent};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, name, turns, branch_every] = args.as_slice() else {
        return Err("usage: seed_tree ADDR NAME TURNS BRANCH_EVERY".into());
    };
    let turns: u64 = turns.parse().map_err(|_| "TURNS is a number")?;
    let branch_every: u64 = branch_every
        .parse()
        .map_err(|_| "BRANCH_EVERY is a number")?;
    let client = Client::connect(ClientConfig::new(addr.clone())).await?;
    let context = client
        .open_context(NewContext::new().name(name.clone()))
        .await?
        .context
        .context_id;
    let mut appended_ids: Vec<u64> = Vec::with_capacity(turns as usize);
    let mut head = 0;
    while (appended_ids.len() as u64) < turns {
        let start = appended_ids.len() as u64;
        let count = 64.min(turns - start);
        let batch: Vec<NewTurn> = (start..start + count)
            .map(|index| {
                let role = if index % 2 == 0 { "user" } else { "assistant" };
                let text = format!(
                    "{{\"role\":\"{role}\",\"content\":\"message {index}: {}\"}}",
                    "lorem ipsum ".repeat((index % 7 + 1) as usize)
                );
                let turn = NewTurn::bytes(Bytes::from(text)).codec(1);
                // A branch off a turn a few steps back, as a retry would make.
                if branch_every > 0 && !appended_ids.is_empty() && index % branch_every == 0 {
                    let back = appended_ids.len().saturating_sub(3);
                    turn.parent(Parent::Turn(appended_ids[back]))
                } else {
                    turn
                }
            })
            .collect();
        // A batch's branch points name turns of earlier batches only.
        let batch_ids = client.append_turns(context, None, batch).await?;
        for appended in batch_ids {
            head = appended.turn.turn.turn_id;
            appended_ids.push(head);
        }
    }
    println!("{{\"context_id\":{context},\"head_turn_id\":{head},\"turns\":{turns}}}");
    Ok(())
}
