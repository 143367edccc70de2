//! Who may look at the console.
//!
//! - With the server's token (`--token-file`): every page and API call needs it, as
//!   `Authorization: Bearer TOKEN` (scripts) or as the session cookie `/login` sets after a
//!   form asked for it (browsers). The cookie holds a keyed BLAKE3 hash of the token under a
//!   key drawn at start, never the token: it opens only this console, only until the server
//!   restarts; it is `Secure` when the browser reached the console over HTTPS (a proxy in
//!   front says so). Comparisons run in constant time; a wrong token at `/login` waits
//!   250 ms, and an address that sends too many wrong tokens waits longer (`limiter.rs`).
//! - With a tenants file (`--tenants-file`, decision 0032 §2) a tenant's token with the `read`
//!   right opens the console too, on that tenant's data only (`Viewer::Tenant`: the API reads
//!   through `Engine::scoped`). Its session cookie is `NAME.MAC`, the MAC a keyed BLAKE3 of
//!   the name and the token's digest: checked against the tenants file in force at every
//!   request, so a token removed on SIGHUP, a right taken away or a deleted tenant closes its
//!   sessions at once.
//! - Without a token the console listens on loopback only (`ServerConfig::validate`) and
//!   answers only requests whose `Host` names a loopback address: a web page elsewhere that
//!   points its own host name at 127.0.0.1 (DNS rebinding) gets 403, not the store.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Response, StatusCode};

use ctxstore_engine::{Engine, TenantId};

use super::ConsoleLimits;
use super::assets;
use super::http;
use super::limiter::LoginLimiter;
use crate::tenancy::Tenants;
use crate::tenants_file::Rights;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "ctxstore_console";
/// What a wrong token costs its sender before the answer (brute force at 4 tries a second
/// per connection slot).
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(250);
/// Where the login page shows its message.
const MESSAGE_MARK: &str = "<!--message-->";

/// What a tenant's session MAC is keyed apart from: no other keyed hash of this console
/// (the operator's cookie) can be replayed as one.
const TENANT_SESSION_CONTEXT: &[u8] = b"ctxstore console tenant session\0";

pub struct Auth {
    token: Option<String>,
    /// The key of every session cookie, drawn at start: cookies die with the process.
    key: [u8; 32],
    /// The operator's session cookie (64 hex digits) when there is a token.
    session: Option<String>,
    /// The tenants whose tokens open the console on their own data.
    tenants: Option<TenantLogins>,
    /// Wrong tokens, by address.
    limiter: LoginLimiter,
}

/// The tenants file in force (replaced on SIGHUP) and the store that knows each tenant's id.
struct TenantLogins {
    tenants: Arc<Tenants>,
    store: Engine,
}

impl TenantLogins {
    /// The tenant `name` as a viewer: with the `read` right (the console only reads), known
    /// to the store and not deleted (a standby that has not learnt it yet refuses it, as its
    /// HELLO does).
    fn viewer(&self, name: &str, rights: Rights) -> Option<Viewer> {
        if !rights.read {
            return None;
        }
        let tenant_id = self.store.tenant_by_name(name)?;
        self.store.tenant_ready(tenant_id).then(|| Viewer::Tenant {
            tenant_id,
            name: name.to_string(),
        })
    }
}

/// Whose console a request reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Viewer {
    /// The server's token (or no token, on loopback): the whole store.
    Operator,
    /// A tenant's token: that tenant's data only.
    Tenant { tenant_id: TenantId, name: String },
}

/// Whether a request may read, and as whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    Allowed(Viewer),
    /// No token or session, or a wrong token.
    Denied,
    /// Its address sent too many wrong tokens: the token it sent was not checked.
    Wait(Duration),
}

impl Auth {
    /// Draws the session key from the operating system (`/dev/urandom`) when there is a token.
    pub fn new(token: Option<String>, limits: ConsoleLimits) -> std::io::Result<Auth> {
        let mut key = [0u8; 32];
        if token.is_some() {
            std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
        }
        let session = token.as_ref().map(|token| {
            blake3::keyed_hash(&key, token.as_bytes())
                .to_hex()
                .to_string()
        });
        Ok(Auth {
            token,
            key,
            session,
            tenants: None,
            limiter: LoginLimiter::new(limits),
        })
    }

    /// Lets the tenants of `tenants` (the file in force at each request) log in, each to its
    /// own data. Needs the server's token (a tenants file needs one: `ServerConfig::validate`).
    pub fn with_tenants(mut self, tenants: Arc<Tenants>, store: Engine) -> Auth {
        assert!(self.token.is_some(), "tenants without the operator's token");
        self.tenants = Some(TenantLogins { tenants, store });
        self
    }

    /// Who `token` opens the console as: the operator, a tenant with the `read` right that
    /// the store has registered and not deleted, or nobody.
    fn viewer_of_token(&self, token: &str) -> Option<Viewer> {
        let operator = self
            .token
            .as_deref()
            .is_some_and(|expected| same(token, expected));
        let tenant = self.tenants.as_ref().and_then(|logins| {
            let digest = crate::connection::token_digest(token.as_bytes());
            let tenancy = logins.tenants.current();
            let (name, rights) = tenancy.find(&digest)?;
            logins.viewer(name, rights)
        });
        if operator {
            Some(Viewer::Operator)
        } else {
            tenant
        }
    }

    /// A tenant's session cookie: `NAME.MAC` of one of its tokens in the file in force.
    fn tenant_cookie(&self, name: &str, digest: &[u8; 32]) -> String {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(TENANT_SESSION_CONTEXT);
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(digest);
        format!("{name}.{}", hasher.finalize().to_hex())
    }

    /// Who a session cookie's `value` is: the operator's, or a tenant's whose token is still
    /// in the tenants file in force (each of its tokens tried, all of them every time).
    fn viewer_of_session(&self, value: &str) -> Option<Viewer> {
        if self
            .session
            .as_deref()
            .is_some_and(|session| same(value, session))
        {
            return Some(Viewer::Operator);
        }
        let logins = self.tenants.as_ref()?;
        let (name, _) = value.split_once('.')?;
        let tenancy = logins.tenants.current();
        let entry = tenancy.entries().iter().find(|entry| entry.name == name)?;
        let matched = entry.token_digests.iter().fold(false, |matched, digest| {
            matched | same(value, &self.tenant_cookie(name, digest))
        });
        if !matched {
            return None;
        }
        logins.viewer(name, entry.rights)
    }

    /// The session cookie `viewer` logged in with `token` gets.
    fn session_of(&self, viewer: &Viewer, token: &str) -> Option<String> {
        match viewer {
            Viewer::Operator => self.session.clone(),
            Viewer::Tenant { name, .. } => {
                Some(self.tenant_cookie(name, &crate::connection::token_digest(token.as_bytes())))
            }
        }
    }

    /// Without a token: the request must name a loopback host (403 otherwise).
    pub fn check_host(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<(), Box<Response<Full<Bytes>>>> {
        if self.token.is_some() {
            return Ok(());
        }
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if is_loopback_host(host) && peer.ip().is_loopback() {
            return Ok(());
        }
        Err(Box::new(http::error(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "this console has no token, so it answers only requests to a loopback address \
             (http://127.0.0.1:PORT or http://localhost:PORT); give the server --token-file \
             to serve it under other names",
        )))
    }

    /// Whether the request may read: always without a token; with one, when it carries the
    /// session cookie, or the token as a bearer (a wrong bearer counts against its address
    /// like a wrong token at `/login`).
    pub fn allows(&self, headers: &HeaderMap, peer: SocketAddr) -> Access {
        if self.token.is_none() {
            return Access::Allowed(Viewer::Operator);
        }
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(name, _)| *name == SESSION_COOKIE)
            .find_map(|(_, value)| self.viewer_of_session(value));
        if let Some(viewer) = cookie {
            return Access::Allowed(viewer);
        }
        let mut bearers = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.strip_prefix("Bearer "))
            .peekable();
        if bearers.peek().is_none() {
            return Access::Denied;
        }
        let mut viewer = None;
        let right = || {
            viewer = bearers.find_map(|given| self.viewer_of_token(given.trim()));
            viewer.is_some()
        };
        match self.limiter.check(peer.ip(), Instant::now(), right) {
            Ok(true) => viewer.map_or(Access::Denied, Access::Allowed),
            Ok(false) => Access::Denied,
            Err(wait) => Access::Wait(wait),
        }
    }

    /// The login form (a page without script).
    pub fn login_page(&self) -> Response<Full<Bytes>> {
        self.form(StatusCode::OK, "")
    }

    /// The login form with `message` (HTML of our own) where the page shows one.
    fn form(&self, status: StatusCode, message: &str) -> Response<Full<Bytes>> {
        if self.token.is_none() {
            return http::redirect("/");
        }
        let page = String::from_utf8_lossy(assets::LOGIN_HTML);
        http::html(status, page.replace(MESSAGE_MARK, message))
    }

    /// `POST /login` from `peer` with the form's `token`: the session cookie (`Secure` when
    /// `https`) and the console, or the form again: after a wrong token (`401`), or while the
    /// address must wait (`429` with `Retry-After`; the token is not checked).
    pub async fn login(&self, form: &[u8], peer: SocketAddr, https: bool) -> Response<Full<Bytes>> {
        if self.token.is_none() {
            return http::redirect("/");
        }
        let given = form_urlencoded::parse(form)
            .find(|(name, _)| name == "token")
            .map(|(_, value)| value.trim().to_string())
            .unwrap_or_default();
        let mut viewer = None;
        let right = || {
            viewer = self.viewer_of_token(&given);
            viewer.is_some()
        };
        let session = match self.limiter.check(peer.ip(), Instant::now(), right) {
            Ok(true) => viewer.and_then(|viewer| self.session_of(&viewer, &given)),
            Ok(false) => None,
            Err(wait) => return self.wait_form(wait),
        };
        match session {
            Some(session) => http::with_cookie(
                http::redirect("/"),
                &format!(
                    "{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict{}",
                    secure_attribute(https)
                ),
            ),
            None => {
                tokio::time::sleep(WRONG_TOKEN_DELAY).await;
                let message = if self.tenants.is_some() {
                    "That is not the server's token, nor the token of a tenant with the read \
                     right."
                } else {
                    "That is not the server's token."
                };
                self.form(
                    StatusCode::UNAUTHORIZED,
                    &format!("<p class=\"error\" role=\"alert\">{message}</p>"),
                )
            }
        }
    }

    /// The form again while `wait` lasts (`429` with `Retry-After`).
    fn wait_form(&self, wait: Duration) -> Response<Full<Bytes>> {
        let seconds = retry_after_seconds(wait);
        let message = format!(
            "<p class=\"error\" role=\"alert\">Too many wrong tokens from your address: try \
             again in {seconds} s.</p>"
        );
        let form = self.form(StatusCode::TOO_MANY_REQUESTS, &message);
        http::with_retry_after(form, seconds)
    }

    /// `POST /logout`: the cookie cleared (with the attributes it was set with), back to the
    /// form.
    pub fn logout(&self, https: bool) -> Response<Full<Bytes>> {
        http::with_cookie(
            http::redirect("/login"),
            &format!(
                "{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
                secure_attribute(https)
            ),
        )
    }
}

/// `429 RATE_LIMITED` with `Retry-After`, for a bearer token sent while its address waits.
pub fn wait_error(wait: Duration) -> Response<Full<Bytes>> {
    let seconds = retry_after_seconds(wait);
    let refusal = http::error(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        &format!(
            "too many wrong tokens from this address: its token is not checked for {seconds} s \
             (Retry-After)"
        ),
    );
    http::with_retry_after(refusal, seconds)
}

/// Whole seconds, rounded up: a client that waits `Retry-After` is never early.
fn retry_after_seconds(wait: Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

/// Whether the browser reached the console over HTTPS, as a reverse proxy in front of it says
/// (`X-Forwarded-Proto: https`, or `Forwarded: proto=https`): the console itself speaks plain
/// HTTP. Taken from any sender: it only adds `Secure` to the session cookie, which makes the
/// cookie stricter (a browser then sends it over HTTPS only), never opens anything; a client
/// that claims HTTPS over plain HTTP only keeps its own browser from sending the cookie back.
pub fn reached_over_https(headers: &HeaderMap) -> bool {
    let values = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    // The proxy nearest the client writes the first value.
    let forwarded_proto = values(HeaderName::from_static("x-forwarded-proto"))
        .first()
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let forwarded = values(header::FORWARDED).first().is_some_and(|element| {
        element
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name.eq_ignore_ascii_case("proto")
                    && value.trim_matches('"').eq_ignore_ascii_case("https")
            })
    });
    forwarded_proto || forwarded
}

/// The session cookie's `Secure` attribute, when the console was reached over HTTPS.
fn secure_attribute(https: bool) -> &'static str {
    if https { "; Secure" } else { "" }
}

/// Equal, in time that does not depend on where they differ (both hashed first, so their
/// lengths do not show either).
fn same(given: &str, expected: &str) -> bool {
    constant_time_eq::constant_time_eq_32(
        blake3::hash(given.as_bytes()).as_bytes(),
        blake3::hash(expected.as_bytes()).as_bytes(),
    )
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "evil.example:80",
            "10.0.0.1:80",
            "localhost.evil.example",
            "[::2]:1",
            "0.0.0.0",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn tokens_and_cookies() {
        let auth = Auth::new(Some("s3cret".into()), ConsoleLimits::default()).unwrap();
        let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let session = auth.session.clone().unwrap();
        assert_eq!(session.len(), 64);
        assert!(!session.contains("s3cret"));
        let mut headers = HeaderMap::new();
        assert_eq!(auth.allows(&headers, peer), Access::Denied);
        headers.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(
            auth.allows(&headers, peer),
            Access::Allowed(Viewer::Operator)
        );
        headers.insert(header::AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert_eq!(auth.allows(&headers, peer), Access::Denied);
        headers.insert(
            header::COOKIE,
            format!("a=b; {SESSION_COOKIE}={session}").parse().unwrap(),
        );
        assert_eq!(
            auth.allows(&headers, peer),
            Access::Allowed(Viewer::Operator)
        );
        headers.insert(
            header::COOKIE,
            format!("{SESSION_COOKIE}=s3cret").parse().unwrap(),
        );
        assert_eq!(
            auth.allows(&headers, peer),
            Access::Denied,
            "the token is not a session"
        );
        // Another start, another key: an old cookie opens nothing.
        let again = Auth::new(Some("s3cret".into()), ConsoleLimits::default()).unwrap();
        assert_ne!(again.session, auth.session);
    }

    /// Wrong bearers count against their address: after the free ones, its bearers are not
    /// checked (the right one neither) while a session cookie still opens the console.
    #[test]
    fn wrong_bearers_make_their_address_wait() {
        let auth = Auth::new(Some("s3cret".into()), ConsoleLimits::default()).unwrap();
        let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let mut wrong = HeaderMap::new();
        wrong.insert(header::AUTHORIZATION, "Bearer guess".parse().unwrap());
        for _ in 0..ConsoleLimits::default().login_failures_free_max {
            assert_eq!(auth.allows(&wrong, peer), Access::Denied);
        }
        let mut right = HeaderMap::new();
        right.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(matches!(auth.allows(&right, peer), Access::Wait(_)));
        let other: SocketAddr = "192.0.2.2:5000".parse().unwrap();
        assert_eq!(
            auth.allows(&right, other),
            Access::Allowed(Viewer::Operator)
        );
        let mut cookie = HeaderMap::new();
        let session = auth.session.clone().unwrap();
        cookie.insert(
            header::COOKIE,
            format!("{SESSION_COOKIE}={session}").parse().unwrap(),
        );
        assert_eq!(
            auth.allows(&cookie, peer),
            Access::Allowed(Viewer::Operator)
        );
    }

    #[test]
    fn https_as_a_proxy_says_it() {
        let said = |name: &str, value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            reached_over_https(&headers)
        };
        assert!(!reached_over_https(&HeaderMap::new()));
        assert!(said("x-forwarded-proto", "https"));
        assert!(said("X-Forwarded-Proto", "HTTPS"));
        assert!(said("x-forwarded-proto", "https, http"));
        assert!(!said("x-forwarded-proto", "http"));
        assert!(
            !said("x-forwarded-proto", "http, https"),
            "the client's side is first"
        );
        assert!(said(
            "forwarded",
            "for=192.0.2.60;proto=https;by=203.0.113.43"
        ));
        assert!(said("forwarded", "proto=\"https\""));
        assert!(!said("forwarded", "for=192.0.2.60;proto=http"));
        assert!(!said("forwarded", "proto=http, proto=https"));
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        assert_eq!(retry_after_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_seconds(Duration::from_millis(2001)), 3);
    }
}
