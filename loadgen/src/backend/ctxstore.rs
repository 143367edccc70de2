//! ctxstore over its binary protocol, with the async client (pipelined).

use bytes::Bytes;
use ctxstore_client::{Client, ClientConfig, Idempotency, VerifyPayloads};

use crate::backend::{Ack, BlobRef};
use crate::report::ServerReport;

pub async fn connect(
    addr: &str,
    token: Option<String>,
    client_chunking: bool,
    client_compression: bool,
    verify_payloads: VerifyPayloads,
    idempotency_keys: bool,
) -> anyhow::Result<Client> {
    let mut config = ClientConfig::new(addr.to_string()).with_token(token);
    config.client_name = format!("ctxstore-loadgen {}", env!("CARGO_PKG_VERSION"));
    // On, the client's default chunking (the server's default sizes, so their chunks dedup
    // with the server's); off, every payload travels whole.
    if !client_chunking {
        config.chunking = None;
    }
    // On, the client's default: payloads go as zstd frames made here (issue 38); off, the
    // server compresses them.
    if !client_compression {
        config.compress_level = None;
    }
    config.verify_payloads = verify_payloads;
    if idempotency_keys {
        config.idempotency = Idempotency::Auto;
    }
    Ok(Client::connect(config).await?)
}

/// Request bytes this client has written to its connection (frames, HELLO, chunk look-ups
/// and uploads): what appends cost on the wire, chunked or whole.
pub fn bytes_sent(client: &Client) -> Option<u64> {
    Some(client.bytes_sent())
}

pub async fn create_context(client: &Client) -> anyhow::Result<u64> {
    Ok(client.create_context().await?.context_id)
}

pub async fn append(client: &Client, context: u64, payload: Bytes) -> anyhow::Result<Ack> {
    let appended = client.append(context, None, 1, 1, payload).await?;
    Ok(Ack {
        turn_id: appended.turn.turn_id,
        parent_turn_id: appended.turn.parent_turn_id,
        depth: appended.turn.depth,
        payload_hash: appended.turn.payload_hash.to_hex(),
    })
}

pub async fn get_blob(client: &Client, blob: &BlobRef) -> anyhow::Result<usize> {
    Ok(client
        .blob(ctxstore_client::blob_hash_from_hex(&blob.payload_hash)?)
        .await?
        .len())
}

pub async fn server_report(client: &Client) -> anyhow::Result<ServerReport> {
    let stats = client.stats().await?;
    Ok(ServerReport {
        turns: Some(stats.turns),
        blobs: Some(stats.blobs),
        logical_bytes: Some(stats.logical_bytes),
        stored_bytes: Some(stats.stored_bytes),
        disk_bytes: None,
        dedup_hits: Some(stats.dedup_hits),
    })
}
