//! Who may look at the console.
//!
//! - With the server's token (`--token-file`): every page and API call needs it, as
//!   `Authorization: Bearer TOKEN` (scripts) or as the session cookie `/login` sets after a
//!   form asked for it (browsers). The cookie holds a keyed BLAKE3 hash of the token under a
//!   key drawn at start, never the token: it opens only this console, only until the server
//!   restarts. Comparisons run in constant time; a wrong token waits 250 ms.
//! - Without a token the console listens on loopback only (`ServerConfig::validate`) and
//!   answers only requests whose `Host` names a loopback address: a web page elsewhere that
//!   points its own host name at 127.0.0.1 (DNS rebinding) gets 403, not the store.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap};
use hyper::{Response, StatusCode};

use super::assets;
use super::http;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "ctxstore_console";
/// What a wrong token costs its sender before the answer (brute force at 4 tries a second
/// per connection slot).
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(250);
/// Where the login page shows its message.
const MESSAGE_MARK: &str = "<!--message-->";

pub struct Auth {
    token: Option<String>,
    /// The session cookie's value (64 hex digits) when there is a token.
    session: Option<String>,
}

impl Auth {
    /// Draws the session key from the operating system (`/dev/urandom`) when there is a token.
    pub fn new(token: Option<String>) -> std::io::Result<Auth> {
        let session = match &token {
            None => None,
            Some(token) => {
                let mut key = [0u8; 32];
                std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
                Some(
                    blake3::keyed_hash(&key, token.as_bytes())
                        .to_hex()
                        .to_string(),
                )
            }
        };
        Ok(Auth { token, session })
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

    /// Whether the request carries the token (or the session cookie); always without one.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let (Some(token), Some(session)) = (&self.token, &self.session) else {
            return true;
        };
        let bearer = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.strip_prefix("Bearer "))
            .any(|given| same(given.trim(), token));
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == SESSION_COOKIE && same(value, session));
        bearer || cookie
    }

    /// The login form (a page without script), with a message after a wrong token.
    pub fn login_page(&self, wrong_token: bool) -> Response<Full<Bytes>> {
        if self.token.is_none() {
            return http::redirect("/");
        }
        let page = String::from_utf8_lossy(assets::LOGIN_HTML);
        let (status, message) = if wrong_token {
            (
                StatusCode::UNAUTHORIZED,
                "<p class=\"error\" role=\"alert\">That is not the server's token.</p>",
            )
        } else {
            (StatusCode::OK, "")
        };
        http::html(status, page.replace(MESSAGE_MARK, message))
    }

    /// `POST /login` with the form's `token`: the session cookie and the console, or the
    /// form again.
    pub async fn login(&self, form: &[u8]) -> Response<Full<Bytes>> {
        let (Some(token), Some(session)) = (&self.token, &self.session) else {
            return http::redirect("/");
        };
        let given = form_urlencoded::parse(form)
            .find(|(name, _)| name == "token")
            .map(|(_, value)| value.trim().to_string())
            .unwrap_or_default();
        if !same(&given, token) {
            tokio::time::sleep(WRONG_TOKEN_DELAY).await;
            return self.login_page(true);
        }
        http::with_cookie(
            http::redirect("/"),
            &format!("{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict"),
        )
    }

    /// `POST /logout`: the cookie cleared, back to the form.
    pub fn logout(&self) -> Response<Full<Bytes>> {
        http::with_cookie(
            http::redirect("/login"),
            &format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        )
    }
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
        let auth = Auth::new(Some("s3cret".into())).unwrap();
        let session = auth.session.clone().unwrap();
        assert_eq!(session.len(), 64);
        assert!(!session.contains("s3cret"));
        let mut headers = HeaderMap::new();
        assert!(!auth.allows(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(auth.allows(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert!(!auth.allows(&headers));
        headers.insert(
            header::COOKIE,
            format!("a=b; {SESSION_COOKIE}={session}").parse().unwrap(),
        );
        assert!(auth.allows(&headers));
        headers.insert(
            header::COOKIE,
            format!("{SESSION_COOKIE}=s3cret").parse().unwrap(),
        );
        assert!(!auth.allows(&headers), "the token is not a session");
        // Another start, another key: an old cookie opens nothing.
        let again = Auth::new(Some("s3cret".into())).unwrap();
        assert_ne!(again.session, auth.session);
    }
}
