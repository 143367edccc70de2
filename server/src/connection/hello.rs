//! HELLO and authentication: the connections of a core still waiting for HELLO (the oldest
//! evicted when too many wait), a connection's deadline and progress towards it, and the
//! negotiation itself (`hello`: the highest version both sides speak, kept per connection for
//! decoding; the token as BLAKE3 digests compared in constant time).

use crate::dispatch::Session;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ctxstore_protocol::admin;
use ctxstore_protocol::{
    ErrorCode, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, Response, ServerLimits as WireLimits,
};

use super::CoreContext;
use super::reader::Ending;
use crate::config::ServerLimits;
use crate::dispatch::error;
use crate::local::LocalFlag;

/// The digest tokens are compared by.
pub fn token_digest(token: &[u8]) -> [u8; 32] {
    *blake3::hash(token).as_bytes()
}

/// The connections of a core still waiting for HELLO, oldest first, so that a newcomer can
/// close the oldest when too many are waiting (a flood of silent connections then cycles
/// through its own slots instead of locking real clients out).
///
/// Each entry counts once in the server's `connections_unauthenticated` while it is here.
#[derive(Debug, Default)]
pub struct PendingHellos {
    pub(super) next_id: Cell<u64>,
    pub(super) queue: RefCell<VecDeque<(u64, Rc<LocalFlag>)>>,
}

impl PendingHellos {
    /// Enters a connection just accepted (already counted in `connections_unauthenticated`).
    pub fn register(&self) -> HelloTicket {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let evicted = LocalFlag::new();
        self.queue.borrow_mut().push_back((id, evicted.clone()));
        HelloTicket { id, evicted }
    }

    /// Removes the entry; `false` if it was gone already (evicted).
    fn remove(&self, id: u64) -> bool {
        let mut queue = self.queue.borrow_mut();
        match queue.iter().position(|(entry, _)| *entry == id) {
            Some(position) => {
                queue.remove(position);
                true
            }
            None => false,
        }
    }

    /// Tells the oldest connection still waiting for HELLO to close; `false` if there is none.
    /// The caller takes over its count in `connections_unauthenticated`.
    pub fn evict_oldest(&self) -> bool {
        let oldest = self.queue.borrow_mut().pop_front();
        match oldest {
            Some((_, evicted)) => {
                evicted.raise();
                true
            }
            None => false,
        }
    }
}

/// A connection's place among those waiting for HELLO.
#[derive(Debug)]
pub struct HelloTicket {
    pub(super) id: u64,
    /// Raised when a newer connection needed the place.
    pub(super) evicted: Rc<LocalFlag>,
}

/// Takes one connection off the server's count of connections without HELLO.
pub(super) fn uncount_unauthenticated(core: &CoreContext) {
    core.dispatcher
        .counters
        .connections_unauthenticated
        .fetch_sub(1, Ordering::AcqRel);
}

/// A connection's progress towards HELLO.
pub(super) struct HelloState {
    /// Its entry in the core's `pending_hellos`.
    pub(super) id: u64,
    /// `None` once HELLO succeeded.
    pub(super) deadline: Option<Instant>,
    /// Raised when a newer connection needed its place.
    pub(super) evicted: Rc<LocalFlag>,
    /// The protocol version HELLO negotiated (HELLO itself has the version-1 layout).
    pub(super) version: u16,
}

impl HelloState {
    pub(super) fn new(ticket: HelloTicket, limits: &ServerLimits) -> Self {
        HelloState {
            id: ticket.id,
            deadline: Some(Instant::now() + limits.hello_timeout),
            evicted: ticket.evicted,
            version: PROTOCOL_VERSION_MIN,
        }
    }

    /// Takes the connection off the core's list of those waiting for HELLO, and off the
    /// server's count, unless a newer connection evicted it (and took over its count).
    pub(super) fn leave_pending(&self, core: &CoreContext) {
        if core.pending_hellos.remove(self.id) {
            uncount_unauthenticated(core);
        }
    }
}

/// A HELLO refused: the ERROR to answer and why the connection ends (boxed: the refusal is
/// rare and the answer large).
pub(super) type Refused = Box<(Response, Ending)>;

/// Version negotiation (the highest version both sides speak) and the token check (constant
/// time). Answers HELLO's answer, which holds the negotiated version, and the connection's
/// session: who its token says it is.
pub(super) fn hello(
    core: &CoreContext,
    min_version: u16,
    max_version: u16,
    token: &[u8],
    client_name: &str,
) -> Result<(admin::Negotiated, Session), Refused> {
    let version = max_version.min(PROTOCOL_VERSION);
    if version < min_version || version < PROTOCOL_VERSION_MIN {
        let message = format!(
            "this server speaks protocol versions {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION}, \
             not {min_version}..={max_version}"
        );
        let response = Response::Error {
            code: ErrorCode::UnsupportedVersion,
            detail: u64::from(PROTOCOL_VERSION),
            message,
        };
        return Err(Box::new((response, "unsupported version")));
    }
    let session = session_of(core, token).map_err(|mut refused| {
        // QUOTA_EXCEEDED reaches a connection of version 4 or older as OVERLOADED.
        refused.0 = crate::dispatch::in_version(refused.0, version);
        refused
    })?;
    tracing::debug!(
        client = client_name,
        version,
        tenant = %session.tenant_name,
        "client said hello"
    );
    let limits = &core.limits;
    let engine_limits = core.dispatcher.store.config().limits;
    let negotiated = admin::Negotiated {
        version,
        limits: WireLimits {
            frame_bytes_max: limits.frame_bytes_max,
            requests_in_flight_max: limits.requests_in_flight_max,
            blob_bytes_max: engine_limits.blob_bytes_max,
            read_turns_max: engine_limits.read_turns_max,
            has_blobs_max: limits.has_blobs_max,
        },
        server_name: core.server_name.clone(),
    };
    Ok((negotiated, session))
}

/// Who `token` makes the connection (decision 0032 §1): the operator (its `--token-file`
/// token, or anyone on a server without one), or the tenant whose token it is. The presented
/// token's digest is compared with the operator's and with every tenant's, all in constant
/// time and all of them every time, so the time HELLO takes says neither whether nor whose.
fn session_of(core: &CoreContext, token: &[u8]) -> Result<Session, Refused> {
    let store = &core.dispatcher.store;
    let Some(expected) = &core.token_digest else {
        return Ok(Session::operator(store));
    };
    // Whether a token was given at all is no secret (its bytes and length stay so).
    if token.is_empty() {
        let message = "this server requires a token and none was given (the clients' \
                       --token or CTXSTORE_TOKEN)";
        return Err(Box::new((
            error(ErrorCode::Unauthorized, message),
            "no token",
        )));
    }
    let digest = token_digest(token);
    let operator = constant_time_eq::constant_time_eq_32(&digest, expected);
    let tenants = &core.dispatcher.tenants;
    let tenancy = tenants.as_ref().map(|tenants| tenants.current());
    let tenant = tenancy.as_ref().and_then(|tenancy| tenancy.find(&digest));
    match (operator, tenant, tenants) {
        (true, _, _) => Ok(Session::operator(store)),
        (false, Some((name, rights)), Some(tenants)) => match store.tenant_by_name(name) {
            Some(tenant_id) if store.tenant_ready(tenant_id) => {
                let meter = tenants.meters().of(name);
                let connection = meter.connect().map_err(|refused| {
                    let answer = crate::quota::answer(refused);
                    meter.note(&answer);
                    Box::new((answer, "quota_connections"))
                })?;
                Ok(Session {
                    tenant_id,
                    tenant_name: name.to_string(),
                    rights,
                    engine: store.scoped(tenant_id),
                    meter: Some(meter),
                    connection: Some(connection),
                })
            }
            Some(tenant_id) if store.tenant_deleted(tenant_id) => {
                let message = format!(
                    "tenant {name} was deleted: its tokens are refused for good (remove it \
                     from the tenants file)"
                );
                Err(Box::new((
                    error(ErrorCode::Unauthorized, message),
                    "deleted tenant",
                )))
            }
            _ => {
                let message = format!(
                    "tenant {name} is not registered in this store yet: a primary registers \
                     the tenants of its tenants file at start and on SIGHUP, a standby learns \
                     them (and, when the store seals, their keys) from its primary; try again"
                );
                let refused = (
                    error(ErrorCode::Unauthorized, message),
                    "unregistered tenant",
                );
                Err(Box::new(refused))
            }
        },
        (false, _, _) => {
            let refused = (error(ErrorCode::Unauthorized, "wrong token"), "wrong token");
            Err(Box::new(refused))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_hellos_evict_the_oldest_once() {
        let pending = PendingHellos::default();
        let first = pending.register();
        let second = pending.register();
        assert!(pending.evict_oldest());
        assert!(first.evicted.is_raised() && !second.evicted.is_raised());
        assert!(!pending.remove(first.id), "evicted entries are gone");
        assert!(pending.remove(second.id));
        assert!(!pending.evict_oldest());
    }
}
