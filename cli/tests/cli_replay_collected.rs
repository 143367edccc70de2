//! A replay of a chain whose collected prefix is longer than the server's `read_turns_max`
//! (issue 34 item 6): the first GET_CHAIN window from depth 0 lies wholly in collected history
//! and answers NOT_FOUND; the replay finds where the live part starts and returns it, as it
//! does when the collected prefix fits one window: through the client and the CLI's `replay`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{ClientConfig, ErrorCode};
use ctxstore_testsupport::TestServer;

fn depths(turns: &[ctxstore_client::Turn]) -> Vec<u32> {
    turns.iter().map(|turn| turn.depth).collect()
}

#[test]
fn a_replay_past_a_collected_prefix_longer_than_one_window() {
    let server = TestServer::start_with(None, &["--read-turns-max", "8"]);
    let client = Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    let mut turns = Vec::new();
    for i in 0..40u32 {
        let payload = Bytes::from(format!("turn {i}"));
        let appended = client.append(context, None, 0, 0, payload).unwrap();
        turns.push(appended.turn.turn_id);
    }
    // A short prefix first (fits the first window), then one of 30 depths (almost 4 windows).
    let other = client.create_context().unwrap().context_id;
    let mut other_turns = Vec::new();
    for i in 0..12u32 {
        let payload = Bytes::from(format!("other {i}"));
        other_turns.push(
            client
                .append(other, None, 0, 0, payload)
                .unwrap()
                .turn
                .turn_id,
        );
    }
    client.prune_context(other, 9).unwrap();
    client.prune_context(context, 10).unwrap();
    let report = client.gc().unwrap();
    assert_eq!(report.turns_dead, 3 + 30, "{report:?}");

    let replayed = client.replay(*turns.last().unwrap(), true).unwrap();
    assert_eq!(depths(&replayed), (30..40).collect::<Vec<_>>());
    assert_eq!(replayed[0].turn_id, turns[30]);
    let short = client.replay(*other_turns.last().unwrap(), false).unwrap();
    assert_eq!(depths(&short), (3..12).collect::<Vec<_>>());
    // A replay from a turn inside the live part starts at the same place.
    let middle = client.replay(turns[35], false).unwrap();
    assert_eq!(depths(&middle), (30..36).collect::<Vec<_>>());
    // A collected turn itself is still NOT_FOUND.
    let error = client.replay(turns[5], false).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound), "{error}");

    // The CLI's replay (its turns with their extras), with and without payloads.
    let cli = env!("CARGO_BIN_EXE_ctxstore");
    for extra in [&[][..], &["--payloads"][..]] {
        let tip = turns.last().unwrap().to_string();
        let output = std::process::Command::new(cli)
            .args(["--addr", &server.addr, "--json", "replay", &tip])
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let lines = String::from_utf8(output.stdout).unwrap();
        let depths: Vec<u64> = lines
            .lines()
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).unwrap()["depth"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(depths, (30..40).collect::<Vec<_>>(), "{extra:?}");
    }
}
