//! `--replicate-to URL` / `--from URL` / `--follow URL`: which object store, which prefix.
//!
//! - `s3://BUCKET/PREFIX`: S3 or an S3-compatible server (SeaweedFS, MinIO, …) through
//!   `object_store`'s `AmazonS3Builder::from_env`: credentials, region and endpoint from the usual
//!   `AWS_*` variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//!   `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`), each of which `S3Settings` may set instead.
//! - `file:///DIR`: a directory (another mount, a network file system), created if missing.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;

use crate::error::ReplicaError;
use crate::remote::Remote;

/// S3 settings that override the environment (the server's config file or flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub allow_http: Option<bool>,
    /// SigV4-sign each PUT's body (`x-amz-content-sha256` holds its SHA-256) instead of
    /// sending `UNSIGNED-PAYLOAD`. Off by default: the SHA-256 was most of the shipper's CPU
    /// (benches/results/HISTORY.md, issue 31), and it guards nothing ours does not: every object
    /// carries a BLAKE3 checksum that restore and the standby check, and TLS (https://
    /// endpoints) guards the transfer.
    pub sign_payload: bool,
}

/// How long one request to the object store may take, and how often the client itself retries
/// a failed one: bounded, so that a cycle ends and the next one (or the caller) decides.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CLIENT_RETRIES_MAX: usize = 2;
const CLIENT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens the replica location `url` (nothing is read or written yet).
pub fn open(url: &str, s3: &S3Settings) -> Result<Remote, ReplicaError> {
    open_with_timeout(url, s3, REQUEST_TIMEOUT)
}

/// `open` for a poller whose requests are small (a standby: listings, HEADs, segments): one
/// that hangs is given up after `request_timeout` and the next poll tries again, instead of
/// holding every later poll back for the shipper's 30 s (SeaweedFS was seen to hold a
/// request that long).
pub fn open_with_timeout(
    url: &str,
    s3: &S3Settings,
    request_timeout: Duration,
) -> Result<Remote, ReplicaError> {
    let invalid = |reason: String| ReplicaError::Target {
        url: url.to_string(),
        reason,
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("no bucket: write s3://BUCKET/PREFIX".into()));
        }
        use object_store::ClientConfigKey;
        use object_store::aws::AmazonS3ConfigKey;
        // Timeouts through `with_config`: `with_client_options` would replace what `from_env`
        // read (AWS_ALLOW_HTTP and the proxy settings are client options).
        let seconds = |duration: Duration| format!("{}s", duration.as_secs());
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                seconds(request_timeout.max(Duration::from_secs(1))),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                seconds(CONNECT_TIMEOUT),
            )
            .with_retry(object_store::RetryConfig {
                max_retries: CLIENT_RETRIES_MAX,
                retry_timeout: CLIENT_RETRY_TIMEOUT,
                ..object_store::RetryConfig::default()
            })
            .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
            .with_unsigned_payload(!s3.sign_payload);
        if let Some(endpoint) = &s3.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &s3.region {
            builder = builder.with_region(region);
        }
        if let Some(allow) = s3.allow_http {
            builder = builder.with_allow_http(allow);
        }
        let store = builder
            .build()
            .map_err(|error| invalid(format!("cannot configure S3: {error}")))?;
        let store: Arc<dyn ObjectStore> = Arc::new(store);
        return Ok(Remote::new(store, prefix, url));
    }
    if let Some(dir) = url.strip_prefix("file://") {
        if !dir.starts_with('/') {
            return Err(invalid(
                "a file:// URL needs an absolute path: file:///DIR".into(),
            ));
        }
        ctxstore_engine::files::create_dir_all(std::path::Path::new(dir))
            .map_err(|source| ReplicaError::io(dir, source))?;
        let store = LocalFileSystem::new_with_prefix(dir)
            .map_err(|error| invalid(format!("cannot use the directory: {error}")))?;
        let store: Arc<dyn ObjectStore> = Arc::new(store);
        let mut remote = Remote::new(store, "", url);
        remote.local_dir = Some(std::path::PathBuf::from(dir));
        return Ok(remote);
    }
    Err(invalid(
        "not a replica URL: use s3://BUCKET/PREFIX or file:///DIR".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_or_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/replica", dir.path().display());
        let remote = open(&url, &S3Settings::default()).unwrap();
        assert_eq!(remote.layout.prefix(), "");
        for bad in ["", "s3://", "file://relative/dir", "http://x", "gs://b/p"] {
            let error = open(bad, &S3Settings::default()).unwrap_err().to_string();
            assert!(error.contains("replication target"), "{bad}: {error}");
        }
        let settings = S3Settings {
            endpoint: Some("http://127.0.0.1:8333".into()),
            region: Some("us-east-1".into()),
            allow_http: Some(true),
            sign_payload: false,
        };
        let remote = open("s3://bucket/a/b/", &settings).unwrap();
        assert_eq!(remote.layout.prefix(), "a/b");
    }
}
