//! The appends family's calls: `append` and `append_by_hash` (version 1), `append_turns` and
//! `append_turn` (version 2, decision 0009: parents, keys with `existing`, labels, links,
//! summaries). An append by value of a payload over `ChunkingConfig::threshold_bytes` on a
//! version-2 connection is stored as chunks first (`blobs.rs`, `store_chunked`) and appended
//! by hash; on a version-3 connection the others travel as zstd frames made here
//! (`compress.rs`, issue 38). Every append carries its handle's durability
//! (`Client::with_durability`, the frame flag `ACK_AFTER`, decision 0031); a chunked one on its
//! final append, whose cut holds the chunks too.

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::appends;
use ctxstore_protocol::check_request;
use ctxstore_protocol::{
    AppendedWire, Ask, ContextRef, ExtrasWire, MessageType, ParentWire, PayloadSpec, TurnSpec,
};

use crate::client::{Client, check_pair};
use crate::config::Idempotency;
use crate::error::ClientError;
use crate::types::{Appended, AppendedTurn, BlobHash, NewTurn, Turn, TurnInfo};
use ctxstore_protocol::vectors::VectorTurnWire;

/// The vectors of an APPEND_TURNS_VECTORS: per turn, in order.
struct TurnsVectors {
    index: String,
    dims: u16,
    vectors: Vec<Vec<Vec<f32>>>,
}

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Appends a turn; durable when it returns. `expected_head`: compare-and-set on the head
    /// (0 = the context must be empty); a moved head is `ErrorCode::Conflict` with the actual
    /// head in `detail`.
    ///
    /// A payload larger than `ClientConfig::chunking`'s threshold, on a version-2 connection,
    /// is stored as chunks first, sending only those the server lacks (see `store_chunked`),
    /// then appended by hash (APPEND_TURN_BY_HASH): three round trips instead of one, and the
    /// bytes the payload grew by instead of all of it. `deduped` says whether the whole
    /// payload was stored before this call, as for an append by value.
    pub async fn append(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        payload: Bytes,
    ) -> Result<Appended, ClientError> {
        let context = context.into();
        if self.auto_keys() {
            // `Idempotency::Auto`: one turn with a key of its own, by APPEND_TURNS.
            let turn = NewTurn::bytes(payload).type_tag(type_tag).codec(codec);
            let appended = self.append_turn(context, expected_head, turn).await?;
            return Ok(Appended {
                turn: appended.turn.turn,
                deduped: appended.deduped,
            });
        }
        let request = appends::AppendTurn {
            context: context.clone(),
            expected_head,
            type_tag,
            codec,
            payload: payload.clone(),
        };
        if self.chunking_for(payload.len()).is_none() {
            return match self.payload_spec(payload) {
                PayloadSpec::Bytes(_) => self.appended(request).await,
                compressed => {
                    let turn = TurnSpec {
                        parent: ParentWire::Head,
                        type_tag,
                        codec,
                        summary: false,
                        extras: ExtrasWire::default(),
                        payload: compressed,
                    };
                    self.appended_compressed(context, expected_head, turn).await
                }
            };
        }
        // What the wire cannot carry is refused before any chunk is sent.
        check_request(&request.clone().into())?;
        if let Some(stored) = self.store_chunked(&payload).await? {
            let by_hash = appends::AppendTurnByHash {
                context,
                expected_head,
                type_tag,
                codec,
                payload_hash: stored.payload_hash,
            };
            let mut appended = self.appended(by_hash).await?;
            // The server answers an append by hash deduped (the blob was there): say instead
            // whether it was there before this call.
            appended.deduped = stored.already_stored;
            return Ok(appended);
        }
        self.appended(request).await
    }

    /// Appends a turn whose payload is already stored, by its hash (no upload).
    pub async fn append_by_hash(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        hash: BlobHash,
    ) -> Result<Appended, ClientError> {
        let payload_hash = hash;
        let request = appends::AppendTurnByHash {
            context: context.into(),
            expected_head,
            type_tag,
            codec,
            payload_hash,
        };
        self.appended(request).await
    }

    /// `append` of a payload compressed here (`compress.rs`): the one turn goes in
    /// APPEND_TURNS, the message that carries frames (version 3), and is answered as
    /// APPEND_TURN would be.
    async fn appended_compressed(
        &self,
        context: ContextRef,
        expected_head: Option<u64>,
        turn: TurnSpec,
    ) -> Result<Appended, ClientError> {
        let request = appends::AppendTurns {
            context,
            expected_head,
            turns: vec![turn],
        };
        let appends::AppendedTurns { turns } = self.ask(request).await?;
        check_pair(MessageType::AppendTurns, turns.len() == 1)?;
        Ok(Appended {
            turn: Turn::from_wire(&turns[0].turn, None),
            deduped: turns[0].deduped,
        })
    }

    async fn appended<Q: Ask<Answer = appends::Appended>>(
        &self,
        request: Q,
    ) -> Result<Appended, ClientError> {
        let appends::Appended { turn, deduped, .. } = self.ask(request).await?;
        Ok(Appended {
            turn: Turn::from_wire(&turn, None),
            deduped,
        })
    }

    /// Appends turns to one context, in order, all or none, in one request and one group
    /// commit (APPEND_TURNS; 1..=[`APPEND_BATCH_TURNS_MAX`] turns): e.g. an agent step's tool call,
    /// its result and a message. Durable when it returns. Each turn hangs on its `parent`
    /// (the head — for the second and later turns, the turn before it —, a new root, or a
    /// turn the context owns); the head moves to the last turn. `expected_head`: the
    /// compare-and-set of `append`, checked before the first turn.
    ///
    /// A turn whose key the context already has is not written: it comes back as that earlier
    /// turn (with the extras it was stored with) and `existing = true`, so an append retried
    /// after a lost answer is stored once. One `AppendedTurn` per turn, in order.
    ///
    /// Each payload given by value and larger than `ClientConfig::chunking`'s threshold is
    /// stored as chunks first, sending only those the server lacks (as `append` does), and
    /// goes in APPEND_TURNS by hash; `deduped` then says whether it was stored before this
    /// call. A payload stored so for a turn whose key turns out to exist stays unnamed until
    /// garbage collection takes it.
    pub async fn append_turns(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turns: Vec<NewTurn>,
    ) -> Result<Vec<AppendedTurn>, ClientError> {
        self.send_turns(context.into(), expected_head, turns, None)
            .await
    }

    /// `append_turns` with each turn's vectors (APPEND_TURNS_VECTORS, protocol version 7): up
    /// to 16 per turn, all of `index`, each of `dims` finite components (checked here before
    /// sending; an empty list: that turn has none). The server stores each turn's vectors as
    /// one blob before the turns, and `vector_search_turns` finds them.
    pub async fn append_turns_vectors(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        index: &str,
        dims: u16,
        turns: Vec<(NewTurn, Vec<Vec<f32>>)>,
    ) -> Result<Vec<AppendedTurn>, ClientError> {
        for (at, (_, vectors)) in turns.iter().enumerate() {
            for (number, vector) in vectors.iter().enumerate() {
                if vector.len() != usize::from(dims) || !ctxstore_vocab::vectors::all_finite(vector)
                {
                    return Err(ClientError::InvalidArgument(format!(
                        "turn {at}'s vector {number} has {} components, not {dims} finite ones",
                        vector.len()
                    )));
                }
            }
        }
        let (turns, vectors): (Vec<NewTurn>, Vec<Vec<Vec<f32>>>) = turns.into_iter().unzip();
        let vectors = TurnsVectors {
            index: index.to_owned(),
            dims,
            vectors,
        };
        self.send_turns(context.into(), expected_head, turns, Some(vectors))
            .await
    }

    /// APPEND_TURNS, or APPEND_TURNS_VECTORS with `vectors`: keys, chunks and compression as
    /// `append_turns` says.
    async fn send_turns(
        &self,
        context: ContextRef,
        expected_head: Option<u64>,
        turns: Vec<NewTurn>,
        vectors: Option<TurnsVectors>,
    ) -> Result<Vec<AppendedTurn>, ClientError> {
        let mut turns = turns;
        if self.auto_keys() {
            for turn in turns.iter_mut().filter(|turn| turn.key.is_none()) {
                turn.key = Some(Idempotency::auto_key());
            }
        }
        let asked: Vec<_> = turns.iter().map(NewTurn::extras).collect();
        let mut specs: Vec<TurnSpec> = turns.into_iter().map(NewTurn::into_wire).collect();
        let stored_before = self
            .store_chunked_specs(&context, expected_head, &mut specs)
            .await?;
        // What still goes by value goes as its zstd frame where this connection compresses.
        for spec in &mut specs {
            if let PayloadSpec::Bytes(bytes) = &spec.payload {
                spec.payload = self.payload_spec(bytes.clone());
            }
        }
        let answered = match vectors {
            None => {
                let request = appends::AppendTurns {
                    context: context.clone(),
                    expected_head,
                    turns: specs,
                };
                self.ask(request).await?.turns
            }
            Some(TurnsVectors {
                index,
                dims,
                vectors,
            }) => {
                let request = ctxstore_protocol::vectors::AppendTurnsVectors {
                    context: context.clone(),
                    expected_head,
                    index,
                    dims,
                    turns: specs
                        .into_iter()
                        .zip(vectors)
                        .map(|(spec, vectors)| VectorTurnWire { spec, vectors })
                        .collect(),
                };
                self.ask(request).await?.turns
            }
        };
        if answered.len() != asked.len() {
            return Err(ClientError::Protocol(format!(
                "APPEND_TURNS of {} turns answered {}",
                asked.len(),
                answered.len()
            )));
        }
        let mut appended = Vec::with_capacity(answered.len());
        for (answer, extras) in answered.into_iter().zip(asked) {
            appended.push(self.appended_turn(&context, answer, extras).await?);
        }
        // Sent by hash after a chunked put: the server answers deduped (the blob was there by
        // then); say instead whether it was there before this call.
        for (appended, before) in appended.iter_mut().zip(stored_before) {
            if let Some(before) = before {
                appended.deduped = before;
            }
        }
        Ok(appended)
    }

    /// Stores each payload of `specs` given by value and over the chunking threshold as
    /// chunks (`store_chunked`), and names it by hash instead; per turn, whether its payload
    /// was stored before this call (`None`: it goes as it was). What the wire cannot carry is
    /// refused before any chunk is sent.
    async fn store_chunked_specs(
        &self,
        context: &ContextRef,
        expected_head: Option<u64>,
        specs: &mut [TurnSpec],
    ) -> Result<Vec<Option<bool>>, ClientError> {
        let mut stored_before = vec![None; specs.len()];
        let chunked = |spec: &TurnSpec| match &spec.payload {
            PayloadSpec::Bytes(payload) => self.chunking_for(payload.len()).is_some(),
            PayloadSpec::Hash(_) | PayloadSpec::Zstd { .. } => false,
        };
        if !specs.iter().any(chunked) {
            return Ok(stored_before);
        }
        let request = appends::AppendTurns {
            context: context.clone(),
            expected_head,
            turns: specs.to_vec(),
        };
        check_request(&request.into())?;
        for (spec, before) in specs.iter_mut().zip(&mut stored_before) {
            let PayloadSpec::Bytes(payload) = &spec.payload else {
                continue;
            };
            if let Some(stored) = self.store_chunked(payload).await? {
                spec.payload = PayloadSpec::Hash(stored.payload_hash);
                *before = Some(stored.already_stored);
            }
        }
        Ok(stored_before)
    }

    /// One turn of APPEND_TURNS' answer with its extras: those asked for when it was written
    /// now (labels sorted, as stored); when its key was there already, the earlier turn's,
    /// read by the key (they may differ from what this call asked; one round trip per retry).
    async fn appended_turn(
        &self,
        context: &ContextRef,
        answer: AppendedWire,
        extras: ExtrasWire,
    ) -> Result<AppendedTurn, ClientError> {
        let turn = if answer.existing {
            let key = extras.key;
            match self.turn_by_key(context.clone(), key.clone()).await? {
                Some(info) if info.turn.turn_id == answer.turn.turn_id => info,
                found => {
                    return Err(ClientError::Protocol(format!(
                        "APPEND_TURNS answered turn {} as the one with the key {:?}, \
                         GET_TURN_BY_KEY answered {:?}",
                        answer.turn.turn_id,
                        String::from_utf8_lossy(&key),
                        found.map(|info| info.turn.turn_id)
                    )));
                }
            }
        } else {
            TurnInfo::from_wire(&answer.turn, extras, None)
        };
        Ok(AppendedTurn {
            turn,
            deduped: answer.deduped,
            existing: answer.existing,
        })
    }

    /// Whether appends get keys made here (`Idempotency::Auto`, on a connection that has
    /// APPEND_TURNS).
    fn auto_keys(&self) -> bool {
        self.shared.config.idempotency == Idempotency::Auto && self.protocol_version() >= 2
    }

    /// Appends one turn with its options (parent, key, labels, links, summary): `append_turns`
    /// with one turn.
    pub async fn append_turn(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turn: NewTurn,
    ) -> Result<AppendedTurn, ClientError> {
        let mut appended = self
            .append_turns(context, expected_head, vec![turn])
            .await?;
        appended
            .pop()
            .ok_or_else(|| ClientError::Protocol("APPEND_TURNS answered no turn".into()))
    }
}
