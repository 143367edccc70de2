//! ctxstore over its binary protocol, with the async client (pipelined).

use bytes::Bytes;
use ctxstore_client::{BlobHash, Client, ClientConfig};

use crate::backend::{Ack, BlobRef};
use crate::report::ServerReport;

pub async fn connect(
    addr: &str,
    token: Option<String>,
    client_chunking: bool,
) -> anyhow::Result<Client> {
    let mut config = ClientConfig::new(addr.to_string()).with_token(token);
    config.client_name = format!("ctxstore-loadgen {}", env!("CARGO_PKG_VERSION"));
    set_chunking(&mut config, client_chunking);
    Ok(Client::connect(config).await?)
}

/// Sub-blob dedup on the client's side (issue 16: large payloads sent as the chunks the
/// server lacks). This client has no chunking yet: it always sends whole payloads, so
/// `enabled` changes nothing until `ClientConfig::chunking` exists.
fn set_chunking(_config: &mut ClientConfig, _enabled: bool) {}

/// Request bytes this client has written to its connection, where the client counts them
/// (`Client::bytes_sent`, which comes with the chunked wire path of issue 16). `None` from a
/// client without the counter: the growing report then counts payload bytes, marked as such.
pub fn bytes_sent(_client: &Client) -> Option<u64> {
    None
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
        .blob(BlobHash::from_hex(&blob.payload_hash)?)
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
