//! `ctxstore-loadgen check`: read ack logs against a store and say what was lost (decision
//! 0031, build plan step 9). The failover campaign's judge and an operator's drill check:
//!
//! - every append acknowledged `remote` is in the store, with its exact payload hash, parent,
//!   depth and context, and on its context's chain at its depth (in the context's order);
//! - an append acknowledged `local` (or with the server's default) may be missing only as
//!   one of a fault's losses (`faults_unix_ms`): acknowledged before the fault, or at most
//!   `loss_window` after it, and the losses of one fault spanning less than `loss_window`:
//!   what a failover may lose in that mode, at most one lease window;
//! - no TurnID names two different turns, in the logs or between a log and the store;
//! - no payload is twice in its context's chain (every payload of the load is distinct,
//!   `--dup-ratio 0`): a retried append landed exactly once.
//!
//! Reads only; the store may be a cluster (`--addr A,B,C`: the client follows the primary) or
//! a server started on a restore of the replica.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use ctxstore_client::{Client, ClientConfig, ClientError, ErrorCode};

/// Turns read per range request while walking a chain.
const CHAIN_PAGE_TURNS: u32 = 256;
/// Failures listed in the report (the counts are complete).
const FAILURES_LISTED_MAX: usize = 20;

/// One line of an ack log (`--ack-log`), as `driver::Shared::log_ack` writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub context_id: u64,
    pub turn_id: u64,
    pub parent_turn_id: u64,
    pub depth: u32,
    pub payload_hash: String,
    /// `remote` acknowledgements must survive any failover; `local`/`default` ones may be
    /// lost inside the loss window.
    pub remote: bool,
    /// When the load generator had the answer (0 in logs written before the field existed:
    /// such an acknowledgement is never excused).
    pub acked_unix_ms: u64,
}

/// What to check.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub addr: String,
    pub token: Option<String>,
    pub ack_logs: Vec<PathBuf>,
    /// Instants (Unix ms) at which a primary was lost: killed, paused, cut off.
    pub faults_unix_ms: Vec<u64>,
    /// The span of the local acknowledgements one fault may lose: the lease less its margin
    /// (decision 0031 §9).
    pub loss_window: Duration,
}

/// The verdict: counts, and the first failures in words.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub remote_acked: u64,
    pub remote_lost: u64,
    pub local_acked: u64,
    /// Lost local acknowledgements inside the loss window of a fault (allowed).
    pub local_lost_in_window: u64,
    /// Lost local acknowledgements outside every window (a failure).
    pub local_lost_outside: u64,
    /// The lost local acknowledgements (Unix ms, context, TurnID), judged once every context
    /// was read (`judge_local_losses`).
    pub local_lost_unix_ms: Vec<(u64, u64, u64)>,
    /// A TurnID that names two different turns (logs against logs, or logs against store).
    pub turn_ids_reused: u64,
    /// A payload twice in one context's chain.
    pub duplicates: u64,
    /// An acknowledged turn present but not on its context's chain at its depth.
    pub out_of_order: u64,
    pub contexts: u64,
    pub failures: Vec<String>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.remote_lost == 0
            && self.local_lost_outside == 0
            && self.turn_ids_reused == 0
            && self.duplicates == 0
            && self.out_of_order == 0
    }

    fn fail(&mut self, failure: String) {
        if self.failures.len() < FAILURES_LISTED_MAX {
            self.failures.push(failure);
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "passed": self.passed(),
            "contexts": self.contexts,
            "remote": { "acked": self.remote_acked, "lost": self.remote_lost },
            "local": {
                "acked": self.local_acked,
                "lost_in_window": self.local_lost_in_window,
                "lost_outside_window": self.local_lost_outside,
            },
            "turn_ids_reused": self.turn_ids_reused,
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
            "failures": self.failures,
        })
    }

    /// Lines for a person.
    pub fn table(&self) -> String {
        let verdict = if self.passed() { "passed" } else { "FAILED" };
        let rows = [
            (
                "remote acknowledgements",
                format!("{} acked, {} lost", self.remote_acked, self.remote_lost),
            ),
            (
                "local acknowledgements",
                format!(
                    "{} acked, {} lost inside a fault's window, {} outside",
                    self.local_acked, self.local_lost_in_window, self.local_lost_outside
                ),
            ),
            ("TurnIDs naming two turns", self.turn_ids_reused.to_string()),
            ("payloads twice in a chain", self.duplicates.to_string()),
            ("turns off their chain", self.out_of_order.to_string()),
            ("contexts", self.contexts.to_string()),
        ];
        let mut text = format!("check: {verdict}\n");
        for (label, value) in rows {
            text.push_str(&format!("  {label:<26}{value}\n"));
        }
        for failure in &self.failures {
            text.push_str("  - ");
            text.push_str(failure);
            text.push('\n');
        }
        text
    }
}

/// Every line of the logs; a line that does not parse is an error naming the file and line
/// (a torn last line, written while the load generator was killed, is skipped).
pub fn read_ack_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<Ack>> {
    let mut acks = Vec::new();
    for path in paths {
        read_ack_log(path, &mut acks)?;
    }
    Ok(acks)
}

fn read_ack_log(path: &Path, acks: &mut Vec<Ack>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the ack log {}", path.display()))?;
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let torn_tail = index + 1 == lines.len() && !complete;
        match parse_ack(line) {
            Some(ack) => acks.push(ack),
            None if torn_tail => {}
            None => anyhow::bail!(
                "{} line {}: not an ack log line: {line}",
                path.display(),
                index + 1
            ),
        }
    }
    Ok(())
}

fn parse_ack(line: &str) -> Option<Ack> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    Some(Ack {
        context_id: value["context_id"].as_u64()?,
        turn_id: value["turn_id"].as_u64()?,
        parent_turn_id: value["parent_turn_id"].as_u64()?,
        depth: u32::try_from(value["depth"].as_u64()?).ok()?,
        payload_hash: value["payload_hash"].as_str()?.to_string(),
        remote: value["durability"].as_str() == Some("remote"),
        acked_unix_ms: value["acked_unix_ms"].as_u64().unwrap_or(0),
    })
}

/// Checks the logs against the store at `config.addr`.
pub async fn check(config: &CheckConfig) -> anyhow::Result<CheckReport> {
    let acks = read_ack_logs(&config.ack_logs)?;
    let client =
        Client::connect(ClientConfig::new(config.addr.clone()).with_token(config.token.clone()))
            .await
            .with_context(|| format!("connecting to {}", config.addr))?;
    let mut report = CheckReport::default();
    check_logs_agree(&acks, &mut report);
    let mut by_context: BTreeMap<u64, Vec<&Ack>> = BTreeMap::new();
    for ack in &acks {
        by_context.entry(ack.context_id).or_default().push(ack);
    }
    report.contexts = by_context.len() as u64;
    for (context, acks) in by_context {
        let chain = read_chain(&client, context).await?;
        check_context(context, &acks, &chain, &mut report);
    }
    judge_local_losses(config, &mut report);
    Ok(report)
}

/// No TurnID acknowledged for two different turns across the logs.
fn check_logs_agree(acks: &[Ack], report: &mut CheckReport) {
    let mut seen: HashMap<u64, &Ack> = HashMap::new();
    for ack in acks {
        match seen.get(&ack.turn_id) {
            Some(first) if !same_turn(first, ack) => {
                report.turn_ids_reused += 1;
                report.fail(format!(
                    "TurnID {} acknowledged twice for different turns: {first:?} and {ack:?}",
                    ack.turn_id
                ));
            }
            Some(_) => {}
            None => {
                seen.insert(ack.turn_id, ack);
            }
        }
    }
}

fn same_turn(a: &Ack, b: &Ack) -> bool {
    (a.context_id, a.parent_turn_id, a.depth, &a.payload_hash)
        == (b.context_id, b.parent_turn_id, b.depth, &b.payload_hash)
}

/// A turn of a context's chain as the store has it.
#[derive(Clone, Debug)]
struct ChainTurn {
    turn_id: u64,
    parent_turn_id: u64,
    payload_hash: String,
}

/// The context's chain, root first (index = depth: a context's first turn has depth 0); empty when the store has no such
/// context (every acknowledgement in it lost).
async fn read_chain(client: &Client, context: u64) -> anyhow::Result<Vec<ChainTurn>> {
    let head = match client.head(context).await {
        Ok(head) => head,
        Err(error) if not_found(&error) => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("reading context {context}")),
    };
    let mut chain = Vec::with_capacity(head.head_depth as usize + 1);
    let mut depth = 0u32;
    while depth <= head.head_depth {
        let page = client
            .range(context, depth, CHAIN_PAGE_TURNS, false)
            .await
            .with_context(|| format!("reading context {context} from depth {depth}"))?;
        if page.turns.is_empty() {
            break;
        }
        for turn in &page.turns {
            anyhow::ensure!(
                turn.depth == depth,
                "context {context}: the store answered depth {} where {depth} was next",
                turn.depth
            );
            chain.push(ChainTurn {
                turn_id: turn.turn_id,
                parent_turn_id: turn.parent_turn_id,
                payload_hash: turn.payload_hash.to_hex(),
            });
            depth += 1;
        }
    }
    Ok(chain)
}

fn not_found(error: &ClientError) -> bool {
    error.code() == Some(ErrorCode::NotFound)
}

fn check_context(context: u64, acks: &[&Ack], chain: &[ChainTurn], report: &mut CheckReport) {
    let mut hashes = HashSet::with_capacity(chain.len());
    for turn in chain {
        if !hashes.insert(turn.payload_hash.as_str()) {
            report.duplicates += 1;
            report.fail(format!(
                "context {context}: payload {} twice in the chain (turn {})",
                turn.payload_hash, turn.turn_id
            ));
        }
    }
    for ack in acks {
        if ack.remote {
            report.remote_acked += 1;
        } else {
            report.local_acked += 1;
        }
        let at_depth = chain.get(ack.depth as usize);
        match at_depth {
            Some(turn) if turn.turn_id == ack.turn_id => {
                if turn.payload_hash != ack.payload_hash
                    || turn.parent_turn_id != ack.parent_turn_id
                {
                    report.turn_ids_reused += 1;
                    report.fail(format!(
                        "TurnID {} is another turn in the store: {turn:?}, acknowledged {ack:?}",
                        ack.turn_id
                    ));
                }
            }
            Some(turn) if turn.payload_hash == ack.payload_hash => {
                // Its payload at its depth under another TurnID: the acknowledged turn was
                // lost and the same append landed again unkeyed.
                report.out_of_order += 1;
                report.fail(format!(
                    "context {context}: acknowledged turn {} is turn {} in the store",
                    ack.turn_id, turn.turn_id
                ));
            }
            _ => lost(context, ack, report),
        }
    }
}

/// An acknowledged turn not on its context's chain: a remote one is a failure at once; a
/// local one is judged with every other at the end (`judge_local_losses`).
fn lost(context: u64, ack: &Ack, report: &mut CheckReport) {
    if ack.remote {
        report.remote_lost += 1;
        report.fail(format!(
            "context {context}: remote acknowledgement of turn {} (depth {}) lost",
            ack.turn_id, ack.depth
        ));
        return;
    }
    report
        .local_lost_unix_ms
        .push((ack.acked_unix_ms, context, ack.turn_id));
}

/// The bound on local acknowledgements (decision 0031 §9): a failover loses those that came
/// after the newest cut that shipped whole before the old primary stopped, and the primary
/// acknowledges for at most the lease less its margin after that cut was sent. So each lost
/// one belongs to a fault that came after it, or at most the window (`loss_window`) before it
/// (a primary cut off from the store acknowledges up to that long after the fault), and the
/// lost ones of one fault span less than the window. Those that fit no fault's span are
/// failures.
pub fn judge_local_losses(config: &CheckConfig, report: &mut CheckReport) {
    let window_ms = u64::try_from(config.loss_window.as_millis()).unwrap_or(u64::MAX);
    let mut faults = config.faults_unix_ms.clone();
    faults.sort_unstable();
    let mut lost = std::mem::take(&mut report.local_lost_unix_ms);
    lost.sort_unstable();
    // The earliest lost acknowledgement of each fault so far: the start of its span.
    let mut span_start: HashMap<u64, u64> = HashMap::new();
    for &(acked_unix_ms, context, turn_id) in &lost {
        // The first fault it may belong to whose span it keeps under the window.
        let candidates: Vec<u64> = faults
            .iter()
            .copied()
            .filter(|fault| acked_unix_ms > 0 && acked_unix_ms <= fault.saturating_add(window_ms))
            .collect();
        let fits = candidates.iter().copied().find(|fault| {
            span_start
                .get(fault)
                .is_none_or(|start| acked_unix_ms - start < window_ms)
        });
        if let Some(fault) = fits {
            span_start.entry(fault).or_insert(acked_unix_ms);
        }
        let fault = fits.or(candidates.first().copied());
        let within = fits.is_some();
        if within {
            report.local_lost_in_window += 1;
            continue;
        }
        report.local_lost_outside += 1;
        report.fail(format!(
            "context {context}: local acknowledgement of turn {turn_id} (at {acked_unix_ms} ms) \
             lost outside every fault's window (the next fault: {})",
            fault.map_or_else(
                || "none".to_string(),
                |fault| format!(
                    "{fault} ms, whose losses began at {} ms",
                    span_start.get(&fault).copied().unwrap_or(0)
                )
            ),
        ));
    }
    report.local_lost_unix_ms = lost;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(turn: u64, depth: u32, hash: &str, remote: bool, at: u64) -> Ack {
        Ack {
            context_id: 7,
            turn_id: turn,
            parent_turn_id: turn.saturating_sub(1),
            depth,
            payload_hash: hash.into(),
            remote,
            acked_unix_ms: at,
        }
    }

    fn chain(turns: &[(u64, &str)]) -> Vec<ChainTurn> {
        turns
            .iter()
            .map(|(turn, hash)| ChainTurn {
                turn_id: *turn,
                parent_turn_id: turn.saturating_sub(1),
                payload_hash: (*hash).into(),
            })
            .collect()
    }

    fn config(faults: Vec<u64>) -> CheckConfig {
        CheckConfig {
            addr: String::new(),
            token: None,
            ack_logs: Vec::new(),
            faults_unix_ms: faults,
            loss_window: Duration::from_millis(1000),
        }
    }

    /// `check_context` of one context, then the judgement of its local losses.
    fn judged(acks: &[&Ack], chain: &[ChainTurn], faults: Vec<u64>) -> CheckReport {
        let mut report = CheckReport::default();
        check_context(7, acks, chain, &mut report);
        judge_local_losses(&config(faults), &mut report);
        report
    }

    #[test]
    fn a_lost_remote_acknowledgement_fails_and_a_lost_local_one_only_outside_the_window() {
        let acks = [
            ack(1, 0, "a", true, 100),
            ack(2, 1, "b", false, 5_000),
            ack(3, 2, "c", true, 5_100),
        ];
        let refs: Vec<&Ack> = acks.iter().collect();
        let report = judged(&refs, &chain(&[(1, "a")]), vec![5_500]);
        assert_eq!((report.remote_lost, report.local_lost_in_window), (1, 1));
        assert!(!report.passed());

        // No fault after it (within the window): a failure.
        let report = judged(&refs[..2], &chain(&[(1, "a")]), vec![3_000]);
        assert_eq!(report.local_lost_outside, 1);
        assert!(!report.passed());

        // A fault up to a window after it, or before it by less than the window: excused.
        for fault in [9_000, 4_200] {
            let report = judged(&refs[..2], &chain(&[(1, "a")]), vec![fault]);
            assert!(report.passed(), "{fault}: {report:?}");
        }
    }

    #[test]
    fn the_local_losses_of_one_fault_span_less_than_the_window() {
        // Window 1,000 ms: lost at 1,000, 1,500 and 2,100 before a fault at 2,500.
        let acks = [
            ack(1, 0, "a", false, 900),
            ack(2, 1, "b", false, 1_000),
            ack(3, 2, "c", false, 1_500),
            ack(4, 3, "d", false, 2_100),
        ];
        let refs: Vec<&Ack> = acks.iter().collect();
        let report = judged(&refs, &chain(&[(1, "a")]), vec![2_500]);
        assert_eq!(
            (report.local_lost_in_window, report.local_lost_outside),
            (2, 1),
            "{report:?}"
        );
        // Two faults: each keeps its own span.
        let report = judged(&refs, &chain(&[(1, "a")]), vec![1_200, 2_500]);
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn a_payload_twice_and_a_reused_turn_id_fail() {
        let acks = [ack(1, 0, "a", true, 1), ack(2, 1, "b", true, 2)];
        let refs: Vec<&Ack> = acks.iter().collect();
        let report = judged(&refs, &chain(&[(1, "a"), (2, "b"), (3, "b")]), vec![]);
        assert_eq!(report.duplicates, 1);

        let report = judged(&refs, &chain(&[(1, "a"), (2, "x")]), vec![]);
        assert_eq!(report.turn_ids_reused, 1);

        let mut report = CheckReport::default();
        check_logs_agree(
            &[ack(1, 0, "a", true, 1), ack(1, 0, "z", false, 2)],
            &mut report,
        );
        assert_eq!(report.turn_ids_reused, 1);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_a_bad_middle_line_is_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let line = r#"{"context_id":1,"turn_id":2,"parent_turn_id":0,"depth":1,"payload_hash":"ab","durability":"remote","acked_unix_ms":5}"#;
        let torn = dir.path().join("torn");
        std::fs::write(&torn, format!("{line}\n{{\"context_id\":1,")).unwrap_or_default();
        let acks = read_ack_logs(&[torn]).unwrap_or_default();
        assert_eq!(acks.len(), 1);
        assert!(acks[0].remote);
        let bad = dir.path().join("bad");
        std::fs::write(&bad, format!("garbage\n{line}\n")).unwrap_or_default();
        let error = read_ack_logs(&[bad]).err().map(|error| error.to_string());
        assert!(error.is_some_and(|error| error.contains("line 1")));
    }
}
