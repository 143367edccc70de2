//! The reads family's calls: every read that returns turns. Version 1: `turn`, `last`,
//! `before`, `range`, `chain`, `replay`. Version 2 (decision 0009; `ClientError::Unsupported`
//! on a version-1 connection, before sending): turns with their key, labels and links
//! (`TurnInfo`): `turn_by_key`, `turn_info` and `replay_info` (extras of a turn read by id from
//! its owning context's chain, else its turn log), `turn_log` with its cursor, `read_page`,
//! `window`/`window_all`, `find_turns`/`find_all_turns`. A handle with an overlay view
//! (`Client::as_of`) sends each of them as `Request::AsOf` and gives every turn its overlay
//! state. Payloads are verified as `VerifyPayloads` says (decision 0015), large pages on two
//! threads.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::reads;
use ctxstore_protocol::{
    Ask, ContextRef, ErrorCode, OverlayWire, PageKind, PayloadEncoding, ReadsRequest, Request,
    Response, TurnEntry, TurnEntryV2, read_flags,
};

use crate::client::{Client, FIND_PAGE_MAX, LOG_PAGE_MAX, answer_of, is_indexed_label};
use crate::error::ClientError;
use crate::types::{FoundPage, LogCursor, LogPage, Page, Turn, TurnInfo, TurnPage, verify_payload};

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// A read of turns, in this handle's overlay view when it has one: the answer, and one
    /// overlay state per turn of it (`None` without a view).
    async fn read<Q: Ask + Into<ReadsRequest>>(
        &self,
        request: Q,
    ) -> Result<(Q::Answer, Option<Vec<OverlayWire>>), ClientError> {
        let Some(as_of) = self.view else {
            return Ok((self.ask(request).await?, None));
        };
        let request = Request::AsOf {
            as_of,
            read: request.into(),
        };
        match self.request(request).await? {
            Response::Overlaid { response, overlays } => {
                Ok((answer_of::<Q>(Response::Reads(*response))?, Some(overlays)))
            }
            other => Err(ClientError::Protocol(format!(
                "{} in an overlay view was answered without overlay states ({:#06x})",
                Q::MESSAGE_TYPE.name(),
                other.msg_type()
            ))),
        }
    }

    pub async fn turn(&self, turn: u64) -> Result<Turn, ClientError> {
        let (turn, overlays) = self.read(reads::GetTurn { turn_id: turn }).await?;
        let mut turns = vec![Turn::from_wire(&turn, None)];
        set_overlays(turns.iter_mut(), overlays)?;
        Ok(turns.remove(0))
    }

    fn read_flags(&self, payloads: bool) -> u32 {
        match (payloads, self.shared.config.accept_zstd) {
            (false, _) => 0,
            (true, false) => read_flags::WITH_PAYLOADS,
            (true, true) => read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
        }
    }

    /// The `limit` newest turns of a context, oldest first.
    pub async fn last(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(reads::GetLast {
            context: context.into(),
            limit,
            read_flags,
        })
        .await
    }

    /// The `limit` turns older than `before` (a page's `next_before`), oldest first.
    pub async fn before(
        &self,
        context: impl Into<ContextRef>,
        before: u64,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(reads::GetBefore {
            context: context.into(),
            before_turn_id: before,
            limit,
            read_flags,
        })
        .await
    }

    /// Turns of the context's chain with depth in `from_depth..from_depth + limit`.
    pub async fn range(
        &self,
        context: impl Into<ContextRef>,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(reads::GetRangeByDepth {
            context: context.into(),
            from_depth,
            limit,
            read_flags,
        })
        .await
    }

    /// The chain root → `turn`, a window of `limit` turns from `from_depth`.
    pub async fn chain(
        &self,
        turn: u64,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(reads::GetChain {
            turn_id: turn,
            from_depth,
            limit,
            read_flags,
        })
        .await
    }

    /// The whole chain root → `turn`, fetched in pages, oldest first. History a garbage
    /// collection took ends the chain as a root would (decision 0011): the replay is then the
    /// turns above it.
    pub async fn replay(&self, turn: u64, payloads: bool) -> Result<Vec<Turn>, ClientError> {
        let limit = self.server_limits().read_turns_max.clamp(1, 10_000);
        let mut turns: Vec<Turn> = Vec::new();
        let mut from_depth = 0;
        loop {
            let page = match self.chain(turn, from_depth, limit, payloads).await {
                Ok(page) => page,
                // The window's newest depth was collected: the chain's live part starts
                // above it (a collected prefix longer than `read_turns_max`). Found from the
                // tip down, then read up from there like any replay.
                Err(collected) if collected.code() == Some(ErrorCode::NotFound) => {
                    let live_from = self.live_from_depth(turn, limit).await?;
                    if live_from <= from_depth {
                        return Err(collected);
                    }
                    from_depth = live_from;
                    continue;
                }
                Err(other) => return Err(other),
            };
            let done = page
                .turns
                .last()
                .is_none_or(|last| last.depth >= page.tip_depth);
            if let Some(last) = page.turns.last() {
                from_depth = last.depth + 1;
            }
            turns.extend(page.turns);
            if done {
                return Ok(turns);
            }
        }
    }

    /// The lowest depth of `turn`'s chain that a walk down from `turn` reaches before history
    /// a collection took: windows of `limit` turns (without payloads) from the tip down, until
    /// one ends above its lowest depth or its newest depth is collected (NOT_FOUND). A
    /// NOT_FOUND for the tip itself is the caller's error.
    async fn live_from_depth(&self, turn: u64, limit: u32) -> Result<u32, ClientError> {
        // An empty window above the tip: only the tip's depth.
        let tip_depth = self.chain(turn, u32::MAX, 1, false).await?.tip_depth;
        let mut top = tip_depth;
        loop {
            let from_depth = top.saturating_sub(limit - 1);
            let page = match self
                .chain(turn, from_depth, top - from_depth + 1, false)
                .await
            {
                Ok(page) => page,
                // `top` collected: the window above (or the tip) was the lowest live one.
                Err(collected)
                    if top < tip_depth && collected.code() == Some(ErrorCode::NotFound) =>
                {
                    return Ok(top + 1);
                }
                Err(other) => return Err(other),
            };
            match page.turns.first() {
                Some(first) if first.depth == from_depth && from_depth > 0 => top = from_depth - 1,
                Some(first) => return Ok(first.depth),
                None => {
                    return Err(ClientError::Protocol(format!(
                        "GET_CHAIN of turn {turn} answered no turn for depths {from_depth}..={top}"
                    )));
                }
            }
        }
    }

    async fn page<Q: Ask<Answer = reads::Turns> + Into<ReadsRequest>>(
        &self,
        request: Q,
    ) -> Result<Page, ClientError> {
        let (
            reads::Turns {
                next_before,
                tip_depth,
                entries,
                ..
            },
            overlays,
        ) = self.read(request).await?;
        let mut turns = verify_entries(entries, self.verifies_raw_payloads()).await?;
        set_overlays(turns.iter_mut(), overlays)?;
        Ok(Page {
            turns,
            next_before,
            tip_depth,
        })
    }

    fn require_version_2(&self, request: &'static str) -> Result<(), ClientError> {
        let version = self.protocol_version();
        if version < 2 {
            return Err(ClientError::Unsupported {
                request,
                needed: 2,
                version,
            });
        }
        Ok(())
    }

    /// The context's turn with this key, with its extras (GET_TURN_BY_KEY): its own, or one it
    /// inherited through a fork or a clone. `None` when the context has no such key; an
    /// unknown context stays `ErrorCode::NotFound`. (The server answers both with NOT_FOUND;
    /// on a NOT_FOUND this asks CTX_SHOW which it was: one more round trip, on a miss only.)
    pub async fn turn_by_key(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<TurnInfo>, ClientError> {
        let context = context.into();
        let request = reads::GetTurnByKey {
            context: context.clone(),
            key: key.into(),
        };
        match self.read(request).await {
            Ok((reads::TurnInfo { turn, extras }, overlays)) => {
                let mut info = TurnInfo::from_wire(&turn, extras, None);
                set_overlays(std::iter::once(&mut info.turn), overlays)?;
                Ok(Some(info))
            }
            Err(missing) if missing.code() == Some(ErrorCode::NotFound) => {
                // The context's own NOT_FOUND if it is the context that is missing.
                self.context_info(context).await?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// One turn by its id with its key, labels and links (`turn` returns it without them:
    /// GET_TURN does not carry them). Reads the turn, then its extras from the context it was
    /// appended to: one READ_PAGE when the turn is on that context's chain, else that
    /// context's turn log, page by page until the turn is found.
    pub async fn turn_info(&self, turn: u64) -> Result<TurnInfo, ClientError> {
        self.require_version_2("READ_PAGE")?;
        let turn = self.turn(turn).await?;
        let context_id = turn.context_id;
        let mut infos = self.with_extras(context_id, vec![turn]).await?;
        infos
            .pop()
            .ok_or_else(|| ClientError::Protocol("a turn without its extras".into()))
    }

    /// `replay` with each turn's key, labels and links: the chain root → `turn`, oldest
    /// first. The extras come from the context `turn` was appended to (its chain, else its
    /// turn log: every ancestor of a turn is a turn that context owns).
    pub async fn replay_info(
        &self,
        turn: u64,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        self.require_version_2("READ_PAGE")?;
        let turns = self.replay(turn, payloads).await?;
        let Some(context_id) = turns.last().map(|tip| tip.context_id) else {
            return Ok(Vec::new());
        };
        self.with_extras(context_id, turns).await
    }

    /// The extras of `turns`, all owned by `context_id`: from the context's chain when the
    /// deepest of them is on it (a page per `read_turns_max` depths), the rest from its turn
    /// log. Matched by TurnID, so a head that moves meanwhile costs requests, never a wrong
    /// answer (a turn's extras never change).
    async fn with_extras(
        &self,
        context_id: u64,
        turns: Vec<Turn>,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let (Some(low), Some(tip)) = (
            turns.iter().map(|turn| turn.depth).min(),
            turns.iter().max_by_key(|turn| turn.depth),
        ) else {
            return Ok(Vec::new());
        };
        let mut wanted = Wanted::new(&turns);
        self.extras_from_chain(context_id, low, (tip.turn_id, tip.depth), &mut wanted)
            .await?;
        self.extras_from_log(context_id, &mut wanted).await?;
        turns
            .into_iter()
            .map(|turn| match wanted.found.get(&turn.turn_id) {
                Some(info) => Ok(TurnInfo {
                    turn,
                    key: info.key.clone(),
                    labels: info.labels.clone(),
                    links: info.links.clone(),
                }),
                None => Err(ClientError::Protocol(format!(
                    "turn {} is not in the turn log of context {context_id}, which owns it",
                    turn.turn_id
                ))),
            })
            .collect()
    }

    /// The extras of the wanted turns on the context's chain, when the deepest of them
    /// (`tip`: its id and depth) is on it: a READ_PAGE per `read_turns_max` depths from `low`.
    async fn extras_from_chain(
        &self,
        context_id: u64,
        low: u32,
        (tip_id, tip_depth): (u64, u32),
        wanted: &mut Wanted,
    ) -> Result<(), ClientError> {
        let probe = PageKind::Range {
            from_depth: tip_depth,
        };
        let probe = self.read_page(context_id, probe, 1, false).await?;
        let on_chain = probe
            .turns
            .first()
            .is_some_and(|first| first.turn.turn_id == tip_id);
        wanted.keep(probe.turns);
        if !on_chain {
            return Ok(());
        }
        let page_max = self.server_limits().read_turns_max.clamp(1, 10_000);
        let mut depth = low;
        while depth < tip_depth && !wanted.complete() {
            let limit = (tip_depth - depth).min(page_max);
            let window = PageKind::Range { from_depth: depth };
            let page = self.read_page(context_id, window, limit, false).await?;
            let next = page.turns.last().map(|last| last.turn.depth + 1);
            wanted.keep(page.turns);
            match next {
                Some(next) if next > depth => depth = next,
                _ => break,
            }
        }
        Ok(())
    }

    /// The extras of the wanted turns still missing, from the context's turn log, page by
    /// page until they are all found or the log ends.
    async fn extras_from_log(
        &self,
        context_id: u64,
        wanted: &mut Wanted,
    ) -> Result<(), ClientError> {
        let mut cursor: Option<LogCursor> = None;
        while !wanted.complete() {
            let page = self
                .turn_log(context_id, &[], cursor, LOG_PAGE_MAX, false)
                .await?;
            wanted.keep(page.turns);
            match page.next_cursor {
                None => break,
                Some(next) if Some(next) == cursor => {
                    return Err(ClientError::Protocol(format!(
                        "TURN_LOG answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
        Ok(())
    }

    /// One page of the context's turn log (TURN_LOG): every turn it owns, newest first
    /// across all its branches, then the turns it inherited (a clone: its source's up to the
    /// clone; a fork: its base's chain); only those carrying every label of `labels`
    /// (filtered on the server). `cursor`: `None` for the newest, else the previous page's
    /// `next_cursor`; `limit` 1..=[`LOG_PAGE_MAX`]. A page may be short, even empty, while
    /// more match: follow the cursor until it is `None` (or use `turn_log_all`):
    ///
    /// ```no_run
    /// # async fn run(client: ctxstore_client::Client) -> Result<(), ctxstore_client::ClientError> {
    /// let labels = [("run_id".to_string(), "r-1".to_string())];
    /// let mut cursor = None;
    /// loop {
    ///     let page = client.turn_log(7, &labels, cursor, 100, false).await?;
    ///     for info in &page.turns {
    ///         println!("{} {:?}", info.turn.turn_id, info.labels);
    ///     }
    ///     match page.next_cursor {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn turn_log(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        cursor: Option<LogCursor>,
        limit: u32,
        payloads: bool,
    ) -> Result<LogPage, ClientError> {
        let read_flags = self.read_flags(payloads);
        let request = reads::TurnLog {
            context: context.into(),
            labels: labels.to_vec(),
            cursor: cursor.map(|cursor| cursor.0),
            limit,
            read_flags,
        };
        let (
            reads::TurnLogPage {
                next_cursor,
                entries,
            },
            overlays,
        ) = self.read(request).await?;
        let mut turns = verify_entries_v2(entries, self.verifies_raw_payloads()).await?;
        set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
        Ok(LogPage {
            turns,
            next_cursor: next_cursor.map(LogCursor),
        })
    }

    /// The context's turn log (`turn_log`, followed page after page), newest first; the first
    /// `count_max` turns when given. Not a snapshot: turns appended meanwhile may or may not
    /// be seen.
    pub async fn turn_log_all(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let context = context.into();
        let mut turns = Vec::new();
        let mut cursor: Option<LogCursor> = None;
        loop {
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if left == 0 {
                return Ok(turns);
            }
            let limit = LOG_PAGE_MAX.min(u32::try_from(left).unwrap_or(u32::MAX));
            let page = self
                .turn_log(context.clone(), labels, cursor, limit, payloads)
                .await?;
            turns.extend(page.turns);
            match page.next_cursor {
                None => {
                    if let Some(max) = count_max {
                        turns.truncate(max);
                    }
                    return Ok(turns);
                }
                Some(next) if Some(next) == cursor => {
                    return Err(ClientError::Protocol(format!(
                        "TURN_LOG answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }

    /// A page of the context's chain with each turn's key, labels and links (READ_PAGE),
    /// oldest first: `PageKind::Last` reads what `last` reads, `Before` what `before` reads,
    /// `Range` what `range` reads, `Window` what `window` reads.
    pub async fn read_page(
        &self,
        context: impl Into<ContextRef>,
        kind: PageKind,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        let read_flags = self.read_flags(payloads);
        let request = reads::ReadPage {
            context: context.into(),
            kind,
            limit,
            read_flags,
        };
        let (
            reads::Page {
                next_before,
                tip_depth,
                entries,
            },
            overlays,
        ) = self.read(request).await?;
        let mut turns = verify_entries_v2(entries, self.verifies_raw_payloads()).await?;
        set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
        Ok(TurnPage {
            turns,
            next_before,
            tip_depth,
        })
    }

    /// What an agent sends its model: the context's chain from its latest summary turn
    /// (inclusive; from the root when there is none) to the head, oldest first; its newest
    /// `limit` turns when it is longer (continue with `PageKind::Before` and `next_before`, or
    /// use `window_all`). READ_PAGE WINDOW.
    pub async fn window(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        self.read_page(context, PageKind::Window, limit, payloads)
            .await
    }

    /// The whole window (`window`, then older pages down to the latest summary turn or the
    /// root), oldest first; its newest `count_max` turns when given. A head that moves to
    /// another branch between pages makes the next page `ErrorCode::InvalidArgument`; a
    /// window that fits one page (`read_turns_max` turns and the server's response budget) is
    /// read in one request.
    pub async fn window_all(
        &self,
        context: impl Into<ContextRef>,
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let context = context.into();
        let page_max = self.server_limits().read_turns_max.clamp(1, 10_000) as usize;
        if count_max == Some(0) {
            return Ok(Vec::new());
        }
        let first_limit = count_max.map_or(page_max, |max| max.min(page_max));
        let page = self
            .window(context.clone(), first_limit as u32, payloads)
            .await?;
        let mut turns = page.turns;
        let mut before = page.next_before;
        loop {
            let at_start = turns
                .first()
                .is_none_or(|oldest| oldest.turn.summary() || oldest.turn.parent_turn_id == 0);
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if at_start || before == 0 || left == 0 {
                return Ok(turns);
            }
            let kind = PageKind::Before {
                before_turn_id: before,
            };
            let limit = left.min(page_max) as u32;
            let page = self
                .read_page(context.clone(), kind, limit, payloads)
                .await?;
            let mut older = page.turns;
            // The window starts at the latest summary turn: drop what lies before it.
            if let Some(summary) = older.iter().rposition(|info| info.turn.summary()) {
                older.drain(..summary);
            }
            if older.is_empty() {
                return Ok(turns);
            }
            before = page.next_before;
            older.append(&mut turns);
            turns = older;
        }
    }

    /// One page of the turns of every context carrying the label `key = value`, newest
    /// first, older than the turn `before` (0: from the newest), without payloads
    /// (FIND_TURNS; `limit` 1..=[`FIND_PAGE_MAX`]). Answered from the store-wide label index,
    /// which covers the keys `is_indexed_label` names; another key is
    /// `ErrorCode::InvalidArgument` (filter a context's `turn_log` by it instead).
    pub async fn find_turns(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
        before: u64,
        limit: u32,
    ) -> Result<FoundPage, ClientError> {
        let request = reads::FindTurns {
            key: key.into(),
            value: value.into(),
            before_turn_id: before,
            limit,
        };
        let (reads::FoundTurns { next_before, turns }, overlays) = self.read(request).await?;
        let mut turns: Vec<TurnInfo> = turns
            .into_iter()
            .map(|(turn, extras)| TurnInfo::from_wire(&turn, extras, None))
            .collect();
        set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
        Ok(FoundPage { turns, next_before })
    }

    /// Every turn, in any context, carrying all of `labels` (at least one), newest first; the
    /// first `count_max` when given. The server finds the turns of the first indexed label
    /// (`is_indexed_label`; the first label when none is, which the server refuses with a
    /// message saying which keys are indexed); the other labels are checked here, page by
    /// page (`find_turns`).
    pub async fn find_all_turns(
        &self,
        labels: &[(String, String)],
        count_max: Option<usize>,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let Some((key, value)) = labels
            .iter()
            .find(|(key, _)| is_indexed_label(key))
            .or(labels.first())
        else {
            return Err(ClientError::InvalidArgument(
                "finding turns needs at least one label".into(),
            ));
        };
        let mut turns = Vec::new();
        let mut before = 0;
        loop {
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if left == 0 {
                return Ok(turns);
            }
            // With labels checked here, a page's matches are unknown: full pages.
            let limit = match labels.len() {
                1 => FIND_PAGE_MAX.min(u32::try_from(left).unwrap_or(u32::MAX)),
                _ => FIND_PAGE_MAX,
            };
            let page = self.find_turns(key, value, before, limit).await?;
            let matching = page
                .turns
                .into_iter()
                .filter(|info| labels.iter().all(|(key, value)| info.has_label(key, value)));
            turns.extend(matching.take(left));
            if page.next_before == 0 {
                return Ok(turns);
            }
            // Newest first: each page's cursor is older than the last.
            if before != 0 && page.next_before >= before {
                return Err(ClientError::Protocol(format!(
                    "FIND_TURNS answered cursor {} after {before}",
                    page.next_before
                )));
            }
            before = page.next_before;
        }
    }
}

/// The turns whose extras `with_extras` looks for, by TurnID, and those found so far.
struct Wanted {
    ids: HashSet<u64>,
    found: HashMap<u64, TurnInfo>,
}

impl Wanted {
    fn new(turns: &[Turn]) -> Wanted {
        Wanted {
            ids: turns.iter().map(|turn| turn.turn_id).collect(),
            found: HashMap::new(),
        }
    }

    /// Keeps the wanted ones of `infos`.
    fn keep(&mut self, infos: Vec<TurnInfo>) {
        for info in infos {
            if self.ids.contains(&info.turn.turn_id) {
                self.found.insert(info.turn.turn_id, info);
            }
        }
    }

    fn complete(&self) -> bool {
        self.found.len() >= self.ids.len()
    }
}

async fn verify_entries_v2(
    entries: Vec<TurnEntryV2>,
    hash_raw: bool,
) -> Result<Vec<TurnInfo>, ClientError> {
    // Payloads through the version-1 path (on two threads when large), extras beside.
    let mut extras = Vec::with_capacity(entries.len());
    let plain: Vec<TurnEntry> = entries
        .into_iter()
        .map(|entry| {
            extras.push(entry.extras);
            TurnEntry {
                turn: entry.turn,
                payload: entry.payload,
            }
        })
        .collect();
    let turns = verify_entries(plain, hash_raw).await?;
    Ok(turns
        .into_iter()
        .zip(extras)
        .map(|(turn, extras)| TurnInfo::new(turn, extras))
        .collect())
}

/// Payload bytes of a page to inflate or hash above which the work runs on two threads: a
/// page of 64 × 10 KiB costs ~0.7 ms of CPU to verify, half of it can run beside.
const PARALLEL_VERIFY_BYTES_MIN: usize = 128 * 1024;

async fn verify_entries(
    mut entries: Vec<TurnEntry>,
    hash_raw: bool,
) -> Result<Vec<Turn>, ClientError> {
    let work_bytes: usize = entries
        .iter()
        .filter(|entry| hash_raw || entry.payload.encoding == PayloadEncoding::Zstd)
        .map(|entry| entry.payload.raw_len as usize)
        .sum();
    if work_bytes < PARALLEL_VERIFY_BYTES_MIN || entries.len() < 2 {
        return verify_all(entries, hash_raw);
    }
    let second = entries.split_off(entries.len() / 2);
    let beside = tokio::task::spawn_blocking(move || verify_all(second, hash_raw));
    let mut turns = verify_all(entries, hash_raw)?;
    let rest = beside
        .await
        .map_err(|error| ClientError::Protocol(format!("verifying payloads: {error}")))??;
    turns.extend(rest);
    Ok(turns)
}

fn verify_all(entries: Vec<TurnEntry>, hash_raw: bool) -> Result<Vec<Turn>, ClientError> {
    entries
        .into_iter()
        .map(|entry| {
            let payload = verify_payload(
                &entry.turn.payload_hash,
                Some(entry.turn.payload_len),
                entry.payload,
                hash_raw,
            )?;
            Ok(Turn::from_wire(&entry.turn, payload))
        })
        .collect()
}

/// Gives each turn of an answer its overlay state (the decoder checked there is one per turn).
fn set_overlays<'a>(
    turns: impl Iterator<Item = &'a mut Turn>,
    overlays: Option<Vec<OverlayWire>>,
) -> Result<(), ClientError> {
    let Some(overlays) = overlays else {
        return Ok(());
    };
    let mut states = overlays.into_iter();
    for turn in turns {
        let state = states.next().ok_or_else(|| {
            ClientError::Protocol("an overlaid answer with fewer overlay states than turns".into())
        })?;
        turn.set_overlay(state)?;
    }
    Ok(())
}
