//! The console's responses: JSON, errors as `{"error":{"code","message"}}`, the embedded
//! pages and assets, redirects, raw payloads; and the headers every response carries.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

use super::assets::{self, Asset};

/// Longest path plus query a request may have (longer: 414).
pub const URI_BYTES_MAX: usize = 4096;

/// The Content-Security-Policy of every page: scripts, styles and images from the console
/// itself only, no inline script or style, no plugin, no framing; forms post only to the
/// console. Nothing a payload contains can run.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src \
     'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Raw payloads (`/api/turns/N/payload`) get this policy instead: a document opened from
/// one runs nothing and reaches nothing, whatever its bytes claim to be.
pub const PAYLOAD_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; sandbox";

type Body = Full<Bytes>;

fn respond(status: StatusCode, media_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    set(&mut response, header::CONTENT_TYPE, media_type);
    response
}

fn set(response: &mut Response<Body>, name: HeaderName, value: &str) {
    // Every value set here is ASCII of our own making; a value that is not is left out.
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
}

/// The headers every response carries (a payload's own stricter policy is kept).
pub fn secure(response: &mut Response<Body>) {
    if !response
        .headers()
        .contains_key(header::CONTENT_SECURITY_POLICY)
    {
        set(
            response,
            header::CONTENT_SECURITY_POLICY,
            CONTENT_SECURITY_POLICY,
        );
    }
    set(response, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(response, header::X_FRAME_OPTIONS, "DENY");
    set(response, header::REFERRER_POLICY, "no-referrer");
    set(
        response,
        HeaderName::from_static("cross-origin-opener-policy"),
        "same-origin",
    );
    set(
        response,
        HeaderName::from_static("cross-origin-resource-policy"),
        "same-origin",
    );
    if !response.headers().contains_key(header::CACHE_CONTROL) {
        set(response, header::CACHE_CONTROL, "no-store");
    }
}

pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    respond(status, "application/json", value.to_string())
}

/// A typed error: `{"error":{"code":CODE,"message":MESSAGE}}`.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    json(
        status,
        &serde_json::json!({"error": {"code": code, "message": message}}),
    )
}

pub fn text(status: StatusCode, media_type: &str, body: String) -> Response<Body> {
    respond(status, media_type, body)
}

pub fn html(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    respond(status, "text/html; charset=utf-8", body)
}

pub fn redirect(location: &str) -> Response<Body> {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    set(&mut response, header::LOCATION, location);
    response
}

/// The front-end's page (`index.html`); the front-end reads the path and draws the page,
/// its own "not found" page when `status` is 404.
pub fn index(status: StatusCode) -> Response<Body> {
    html(status, Bytes::from_static(assets::INDEX_HTML))
}

/// An embedded asset. Its name does not change with its content, so browsers revalidate.
pub fn asset(asset: &Asset) -> Response<Body> {
    let mut response = respond(
        StatusCode::OK,
        asset.media_type,
        Bytes::from_static(asset.bytes),
    );
    set(&mut response, header::CACHE_CONTROL, "no-cache");
    response
}

/// A payload's raw bytes: a raster image as itself (for `<img>`), anything else as a
/// download; sandboxed either way.
pub fn payload(bytes: Bytes, image_media_type: Option<&str>) -> Response<Body> {
    let mut response = respond(
        StatusCode::OK,
        image_media_type.unwrap_or("application/octet-stream"),
        bytes,
    );
    set(
        &mut response,
        header::CONTENT_SECURITY_POLICY,
        PAYLOAD_CONTENT_SECURITY_POLICY,
    );
    if image_media_type.is_none() {
        set(&mut response, header::CONTENT_DISPOSITION, "attachment");
    }
    response
}

/// A cookie header for the console's session.
pub fn with_cookie(mut response: Response<Body>, cookie: &str) -> Response<Body> {
    set(&mut response, header::SET_COOKIE, cookie);
    response
}

/// `Retry-After: SECONDS` (a `429`).
pub fn with_retry_after(mut response: Response<Body>, seconds: u64) -> Response<Body> {
    set(&mut response, header::RETRY_AFTER, &seconds.to_string());
    response
}
