//! Helpers shared by the client's integration tests.
#![allow(dead_code)]

use ctxstore_client::ClientError;

/// A call refused before it was sent because the server speaks protocol version 1 and the
/// call needs version 2: typed, named, and no connection failure.
pub fn assert_refused_for_version_1(error: &ClientError) {
    assert!(
        matches!(
            error,
            ClientError::Unsupported {
                needed: 2,
                version: 1,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.name(), "UNSUPPORTED_BY_SERVER");
    assert!(!error.is_connection_failure(), "{error}");
}
