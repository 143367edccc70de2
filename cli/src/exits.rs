//! Exit codes and the errors that choose them: the table (`EXIT_CODES`, in `--help` and the
//! README), `classify` (an error's stable name, exit code and detail: 7 = ALREADY_EXISTS, …),
//! and the CLI's own refusals (usage found after parsing, exit 2; an empty payload; a missing
//! key; a closed stdout, which is no error).

use ctxstore_client::{ClientError, ContextRef, ErrorCode};

/// The exit codes, as `--help` and the README show them.
pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0  success (also when stdout is closed early, as in `ctxstore last 1 | head -1`)
  1  any other error (bad input, protocol error, server error other than those below)
  2  the command line does not parse (usage)
  3  NOT_FOUND: the context (ContextID or @NAME), turn, blob or key does not exist
  4  CONFLICT: --expect-head did not match the context's head
  5  connection failure: refused, unresolvable, timed out (connect, handshake or request),
     not a ctxstore server on that port, or the connection lost
  6  UNAUTHORIZED: the token is missing or wrong
  7  ALREADY_EXISTS: another context has that name (`ctx create --get-or-create` answers it)
  8  NOT_PRIMARY: the server takes no writes now (a standby, a fenced primary); nothing
     was written: send it to the primary; NO_PRIMARY: of several --addr, none took writes
     within --failover-timeout
  9  UNCONFIRMED: --durability remote (or the server's --ack-after remote) was not
     confirmed off-host in time; the write is durable on the server but its outcome after
     a failover is unknown: run it again with the same --key (kv put: the same value);
     OUTCOME_UNKNOWN: of several --addr, the primary went with a write without --key in
     flight: it may or may not have landed
 10  QUOTA_EXCEEDED: the write would take the token's tenant past one of its quotas;
     nothing was written (the message names the quota, its limit and the usage)
With --json, an error is also one JSON object on stderr:
  {\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"...\",\"exit_code\":3}}
(`detail` is added for server errors: for CONFLICT, the context's actual head; for
ALREADY_EXISTS, the ContextID that has the name; for UNCONFIRMED, the turn when it has one;
for NOT_PRIMARY, the newest epoch the server knows; for QUOTA_EXCEEDED, the quota's limit).";

pub(crate) const EXIT_OTHER: u8 = 1;

pub(crate) const EXIT_USAGE: u8 = 2;

pub(crate) const EXIT_NOT_FOUND: u8 = 3;

pub(crate) const EXIT_CONFLICT: u8 = 4;

pub(crate) const EXIT_CONNECTION: u8 = 5;

pub(crate) const EXIT_UNAUTHORIZED: u8 = 6;

pub(crate) const EXIT_ALREADY_EXISTS: u8 = 7;

pub(crate) const EXIT_NOT_PRIMARY: u8 = 8;

pub(crate) const EXIT_UNCONFIRMED: u8 = 9;

pub(crate) const EXIT_QUOTA_EXCEEDED: u8 = 10;

/// The error's stable name, exit code and (for server errors) detail.
pub(crate) fn classify(error: &anyhow::Error) -> (&'static str, u8, Option<u64>) {
    for cause in error.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            let exit_code = match client.code() {
                Some(ErrorCode::NotFound) => EXIT_NOT_FOUND,
                Some(ErrorCode::Conflict) => EXIT_CONFLICT,
                Some(ErrorCode::Unauthorized) => EXIT_UNAUTHORIZED,
                Some(ErrorCode::AlreadyExists) => EXIT_ALREADY_EXISTS,
                Some(ErrorCode::NotPrimary) => EXIT_NOT_PRIMARY,
                Some(ErrorCode::Unconfirmed) => EXIT_UNCONFIRMED,
                Some(ErrorCode::QuotaExceeded) => EXIT_QUOTA_EXCEEDED,
                _ if matches!(client, ClientError::NoPrimary { .. }) => EXIT_NOT_PRIMARY,
                _ if client.is_outcome_unknown() => EXIT_UNCONFIRMED,
                _ if client.is_connection_failure() => EXIT_CONNECTION,
                _ => EXIT_OTHER,
            };
            // A detail says something for CONFLICT (the actual head, 0: an empty context) and
            // ALREADY_EXISTS (the ContextID); elsewhere 0 means "none" and is left out.
            let detail = match client {
                ClientError::Server { detail, .. }
                    if *detail != 0
                        || matches!(
                            client.code(),
                            Some(ErrorCode::Conflict | ErrorCode::AlreadyExists)
                        ) =>
                {
                    Some(*detail)
                }
                _ => None,
            };
            return (client.name(), exit_code, detail);
        }
        if let Some(refused) = cause.downcast_ref::<NoPayload>() {
            return (refused.code(), EXIT_OTHER, None);
        }
        if cause.downcast_ref::<NoSuchKey>().is_some() {
            return ("NOT_FOUND", EXIT_NOT_FOUND, None);
        }
        if cause.downcast_ref::<Usage>().is_some() {
            return ("USAGE", EXIT_USAGE, None);
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return ("IO", EXIT_OTHER, None);
        }
    }
    ("ERROR", EXIT_OTHER, None)
}

/// The error as the CLI says it: its chain as `{:#}` prints it, except that a client timeout
/// names the flag that sets it here (`--connect-timeout`, `--timeout`, …), where the library's
/// message names its `ClientConfig` field.
pub(crate) fn message(error: &anyhow::Error) -> String {
    error
        .chain()
        .map(|cause| match cause.downcast_ref::<ClientError>() {
            Some(client) => client_message(client),
            None => cause.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// A client error in the CLI's words (see `message`).
fn client_message(error: &ClientError) -> String {
    match error {
        ClientError::ConnectTimeout { addr, timeout } => format!(
            "timed out after {} connecting to {addr} (--connect-timeout)",
            humantime::format_duration(*timeout)
        ),
        ClientError::HandshakeTimeout { addr, timeout } => format!(
            "{addr} accepted the connection but did not answer HELLO within {}; is it a \
             ctxstore server? (--connect-timeout)",
            humantime::format_duration(*timeout)
        ),
        ClientError::Timeout {
            request,
            timeout,
            setting,
        } => {
            let flag = match *setting {
                "ClientConfig::request_timeout" => "--timeout",
                "ClientConfig::backup_timeout" => "--backup-timeout",
                "ClientConfig::gc_timeout" => "--gc-timeout",
                // A setting the CLI has no flag for: the library's words.
                _ => return error.to_string(),
            };
            format!(
                "{request} got no response within {} ({flag})",
                humantime::format_duration(*timeout)
            )
        }
        ClientError::NoPrimary {
            addrs,
            waited,
            last,
        } => format!(
            "no primary among {addrs} within {} (--failover-timeout): {last}",
            humantime::format_duration(*waited)
        ),
        ClientError::OutcomeUnknown { .. } => {
            format!("{error} (read back to see; a write with --key is sent again safely instead)")
        }
        ClientError::Server {
            code: ErrorCode::Unconfirmed,
            ..
        } => format!(
            "{error} (outcome unknown: run it again with the same --key; a kv put with the \
             same value)"
        ),
        other => other.to_string(),
    }
}

/// Stdout was closed by its reader: stop quietly.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
pub(crate) struct StdoutClosed;

/// `append` or `kv put` refused to send an empty (or absent) payload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoPayload {
    #[error("the payload is empty ({0} gave 0 bytes); pass --allow-empty to {1}")]
    Empty(String, &'static str),
    #[error("no payload: stdin is a terminal; pipe the payload in or pass --file PATH")]
    Terminal,
}

/// `kv get` of a key the context does not have, or `turn CTX --key K` of a turn key.
#[derive(Debug, thiserror::Error)]
#[error("context {context} has no {what} {key:?}")]
pub(crate) struct NoSuchKey {
    pub(crate) context: ContextRef,
    pub(crate) what: &'static str,
    pub(crate) key: String,
}

/// A command line that parses but does not make sense (checked before connecting); exit 2
/// like clap's own refusals.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub(crate) String);

impl NoPayload {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            NoPayload::Empty(..) => "EMPTY_PAYLOAD",
            NoPayload::Terminal => "NO_PAYLOAD",
        }
    }
}
