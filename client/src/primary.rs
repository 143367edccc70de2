//! Following the primary among several addresses (decision 0031 §11). `connect` says HELLO to
//! every listed address at once and asks each what it is (ROLE on version 4; on version 3
//! REPLICATION_STATS: role primary and not fenced, or replication off; older: a primary), and
//! keeps the one that takes writes with the highest epoch; the others are dropped. Only listed
//! addresses are ever connected to: the primary a message or ROLE names is never followed.
//!
//! `Client::request_following` sends a request on the connection of the moment; on a lost
//! connection, a timeout, NOT_PRIMARY, SHUTTING_DOWN or UNCONFIRMED it finds the primary again
//! (backoff 100 ms to 1 s, at most `ClientConfig::failover_timeout`, then
//! `ClientError::NoPrimary`) and retries what is safe (`Safety`): a read always; a write after
//! NOT_PRIMARY always (nothing was written); after a lost connection, a timeout,
//! SHUTTING_DOWN (a stopping engine may drop the answer of a committed write) or UNCONFIRMED
//! only a write that lands once however often it is sent (an
//! APPEND_TURNS whose every turn has a key, a KV put, a chunk, a stream's seal). Any other
//! write then answers `ClientError::OutcomeUnknown`: it may or may not have landed.

use std::time::{Duration, Instant};

use ctxstore_protocol::admin::{ReplicationStats, Role};
use ctxstore_protocol::{
    AppendsRequest, ContextsRequest, ErrorCode, KvRequest, ReplicationRoleWire,
    ReplicationStateWire, Request, Response, StreamsRequest, VectorsRequest,
};
use tokio::task::JoinSet;

use crate::client::Client;
use crate::config::ClientConfig;
use crate::error::ClientError;

/// The first wait between two searches for the primary, doubled up to `BACKOFF_MAX`.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What sending a request again may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Safety {
    /// A read, or a write that lands once however often it is sent: retried whenever.
    Always,
    /// A write that may land twice: retried only when the server said nothing was written.
    NothingWritten,
}

/// Why a request's answer sends the client looking for the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trouble {
    /// NOT_PRIMARY: the request was refused, nothing written.
    Refused,
    /// The connection went, no answer in time, SHUTTING_DOWN or UNCONFIRMED: a write may have
    /// landed.
    Unknown,
}

/// Connects to the primary among `config`'s addresses, waiting up to its `failover_timeout`.
pub(crate) async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
    let deadline = Instant::now() + config.failover_timeout;
    let found = find_until(&config, deadline).await?;
    // The client keeps the whole list; its connection is the one found.
    let client = Client::connect_shell(config, &found);
    Ok(client)
}

/// Looks for the primary until `deadline`, with a backoff between rounds.
async fn find_until(config: &ClientConfig, deadline: Instant) -> Result<Client, ClientError> {
    let mut backoff = BACKOFF_MIN;
    loop {
        let last = match find_once(config).await {
            Ok(found) => return Ok(found),
            Err(last) => last,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(ClientError::NoPrimary {
                addrs: config.addrs().join(","),
                waited: config.failover_timeout,
                last,
            });
        }
        tokio::time::sleep(backoff.min(deadline - now)).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One round: every listed address at once; the one that takes writes with the highest
/// epoch, else what each said.
async fn find_once(config: &ClientConfig) -> Result<Client, String> {
    let mut probes = JoinSet::new();
    for addr in config.addrs() {
        let mut one = config.clone();
        one.addr = addr.clone();
        probes.spawn(async move {
            let answer = probe(one).await;
            (addr, answer)
        });
    }
    let mut best: Option<(u64, Client)> = None;
    let mut said = Vec::new();
    while let Some(joined) = probes.join_next().await {
        let Ok((addr, answer)) = joined else {
            continue;
        };
        match answer {
            Ok((client, true, epoch)) => {
                if best.as_ref().is_none_or(|(best, _)| epoch > *best) {
                    best = Some((epoch, client));
                }
            }
            Ok((_, false, epoch)) => said.push(format!("{addr}: takes no writes (epoch {epoch})")),
            Err(error) => said.push(format!("{addr}: {error}")),
        }
    }
    best.map(|(_, client)| client)
        .ok_or_else(|| said.join("; "))
}

/// Connects to one address and asks what it is: the client, whether it takes writes, its
/// epoch. Its questions wait at most `hello_timeout`: a server that does not answer is not
/// the primary.
async fn probe(config: ClientConfig) -> Result<(Client, bool, u64), ClientError> {
    let wait = Some(config.hello_timeout);
    let setting = "ClientConfig::hello_timeout";
    let client = Client::connect_one(config).await?;
    let version = client.protocol_version();
    let (accepts, epoch) = if version >= 4 {
        let role = client.ask_once(Role, wait, setting).await?;
        (role.accepts_writes, role.epoch)
    } else if version >= 3 {
        let stats = client.ask_once(ReplicationStats, wait, setting).await?;
        let accepts = match stats.role {
            ReplicationRoleWire::Off => true,
            ReplicationRoleWire::Primary => stats.state != ReplicationStateWire::Fenced,
            ReplicationRoleWire::Standby => false,
        };
        (accepts, stats.epoch)
    } else {
        (true, 0)
    };
    Ok((client, accepts, epoch))
}

/// Whether a request may be sent again after its outcome became unknown.
fn safety(request: &Request) -> Safety {
    let landing_once = match request {
        Request::AckAfter { request, .. } => return safety(request),
        Request::Reads(_) | Request::AsOf { .. } | Request::Admin(_) => true,
        Request::Appends(AppendsRequest::AppendTurns(append)) => {
            append.turns.iter().all(|turn| !turn.extras.key.is_empty())
        }
        Request::Appends(_) | Request::Overlays(_) | Request::Retention(_) => false,
        Request::Kv(kv) => matches!(
            kv,
            KvRequest::KvGet(_)
                | KvRequest::KvGetEx(_)
                | KvRequest::KvList(_)
                | KvRequest::KvListEx(_)
                | KvRequest::KvGetMany(_)
                | KvRequest::KvPut(_)
                | KvRequest::KvPutEx(_)
        ),
        Request::Contexts(contexts) => matches!(
            contexts,
            ContextsRequest::GetHead(_)
                | ContextsRequest::CtxShow(_)
                | ContextsRequest::CtxList(_)
                | ContextsRequest::CtxOpen(_)
        ),
        // Content-addressed: a chunk stored twice is stored once.
        Request::Blobs(_) => true,
        Request::Streams(streams) => matches!(
            streams,
            StreamsRequest::StreamList(_)
                | StreamsRequest::StreamRead(_)
                | StreamsRequest::StreamSeal(_)
                | StreamsRequest::Watch(_)
        ),
        // A create answers the index it made (same parameters), a put overwrites; a second
        // drop would answer NOT_FOUND.
        Request::Vectors(vectors) => !matches!(vectors, VectorsRequest::VectorIndexDrop(_)),
    };
    if landing_once {
        Safety::Always
    } else {
        Safety::NothingWritten
    }
}

/// Whether an error sends the client looking for the primary, and what it says of a write.
fn trouble(error: &ClientError) -> Option<Trouble> {
    match error {
        ClientError::Server {
            code: ErrorCode::NotPrimary,
            ..
        } => Some(Trouble::Refused),
        // A stopping engine may drop a write's answer after committing it: unknown.
        ClientError::Server {
            code: ErrorCode::Unconfirmed | ErrorCode::ShuttingDown,
            ..
        }
        | ClientError::Closed(_)
        | ClientError::Timeout { .. } => Some(Trouble::Unknown),
        _ => None,
    }
}

impl Client {
    /// `request` on the primary of several addresses: sent on the connection of the moment;
    /// after an answer that says the primary went (`trouble`), sent again on the new one when
    /// that is safe (`safety`), else `ClientError::OutcomeUnknown`. Gives up after
    /// `ClientConfig::failover_timeout` with the last error (or `NoPrimary`).
    pub(crate) async fn request_following(
        &self,
        request: Request,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Response, ClientError> {
        let deadline = Instant::now() + self.shared.config.failover_timeout;
        let safety = safety(&request);
        let mut backoff = BACKOFF_MIN;
        let mut tries = 0u32;
        loop {
            let generation = self.shared.generation();
            if self.shared.connection().is_closed() {
                // Gone before this request was sent: nothing of it was written.
                self.follow_primary(generation, deadline).await?;
                continue;
            }
            let outcome = self.send_once(&request, timeout, setting).await;
            let Err(error) = &outcome else {
                return outcome;
            };
            match trouble(error) {
                None => return outcome,
                Some(Trouble::Unknown) if safety == Safety::NothingWritten => {
                    return Err(ClientError::OutcomeUnknown {
                        request: request.message_type().name(),
                        reason: error.to_string(),
                    });
                }
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                return outcome;
            }
            if tries > 0 {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            tries += 1;
            self.follow_primary(generation, deadline).await?;
        }
    }

    /// Finds the primary again and moves this client's connection to it, unless another
    /// call did since the connection of `generation` failed.
    async fn follow_primary(&self, generation: u64, deadline: Instant) -> Result<(), ClientError> {
        let _only_one = self.shared.rediscovery.lock().await;
        if self.shared.generation() != generation {
            return Ok(());
        }
        let found = find_until(&self.shared.config, deadline).await?;
        self.shared.adopt(&found);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use ctxstore_protocol::{
        AckAfter, ContextRef, ExtrasWire, ParentWire, PayloadSpec, TurnSpec, appends, kv, streams,
    };

    use super::*;

    fn spec(key: &'static [u8]) -> TurnSpec {
        TurnSpec {
            parent: ParentWire::Head,
            type_tag: 0,
            codec: 0,
            summary: false,
            extras: ExtrasWire {
                key: Bytes::from_static(key),
                ..ExtrasWire::default()
            },
            payload: PayloadSpec::Bytes(Bytes::from_static(b"x")),
        }
    }

    fn append_turns(keys: &[&'static [u8]]) -> Request {
        appends::AppendTurns {
            context: ContextRef::Id(7),
            expected_head: None,
            turns: keys.iter().map(|key| spec(key)).collect(),
        }
        .into()
    }

    /// Sent again after an unknown outcome: reads, keyed turns, KV puts, seals, whatever
    /// durability they ask; never an unkeyed append or a stream's delta.
    #[test]
    fn only_what_lands_once_is_sent_again() {
        assert_eq!(safety(&append_turns(&[b"a", b"b"])), Safety::Always);
        assert_eq!(safety(&append_turns(&[b"a", b""])), Safety::NothingWritten);
        let remote = Request::AckAfter {
            request: Box::new(append_turns(&[b"a"])),
            after: AckAfter::Remote,
        };
        assert_eq!(safety(&remote), Safety::Always);
        let unkeyed: Request = appends::AppendTurn {
            context: ContextRef::Id(7),
            expected_head: None,
            type_tag: 0,
            codec: 0,
            payload: Bytes::from_static(b"x"),
        }
        .into();
        assert_eq!(safety(&unkeyed), Safety::NothingWritten);
        let put: Request = kv::KvPut {
            context: ContextRef::Id(7),
            if_absent: false,
            entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
        }
        .into();
        assert_eq!(safety(&put), Safety::Always);
        let seal: Request = streams::StreamSeal { stream_id: 3 }.into();
        assert_eq!(safety(&seal), Safety::Always);
        let delta: Request = streams::StreamAppend {
            stream_id: 3,
            offset: Some(0),
            bytes: Bytes::from_static(b"d"),
        }
        .into();
        assert_eq!(safety(&delta), Safety::NothingWritten);
    }

    /// NOT_PRIMARY wrote nothing; a lost connection, a timeout, SHUTTING_DOWN and UNCONFIRMED
    /// may have; anything else is the caller's.
    #[test]
    fn what_sends_the_client_looking() {
        let server = |code| ClientError::Server {
            code,
            detail: 0,
            message: String::new(),
        };
        assert_eq!(
            trouble(&server(ErrorCode::NotPrimary)),
            Some(Trouble::Refused)
        );
        for code in [ErrorCode::ShuttingDown, ErrorCode::Unconfirmed] {
            assert_eq!(trouble(&server(code)), Some(Trouble::Unknown), "{code}");
        }
        assert_eq!(
            trouble(&ClientError::Closed("gone".into())),
            Some(Trouble::Unknown)
        );
        assert_eq!(trouble(&server(ErrorCode::NotFound)), None);
        assert_eq!(trouble(&server(ErrorCode::Conflict)), None);
    }
}
