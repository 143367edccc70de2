//! `index create/list/drop` and `search`: vector search (protocol version 6, decision 0033).

use anyhow::Context;
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    ClientError, ErrorCode, Metric, TurnHits, TurnVectorQuery, VectorHits, VectorIndex, VectorQuery,
};
use serde_json::json;

use crate::args::{IndexCommand, QueryArgs, SearchArgs, SearchTurnsArgs};
use crate::output::{Output, readable};

/// `index …`: the tenant's vector indexes.
pub(crate) fn index(client: &Client, out: &Output, command: &IndexCommand) -> anyhow::Result<()> {
    match command {
        IndexCommand::Create {
            name,
            dims,
            metric,
            ef_search,
        } => out.vector_index(&client.vector_index_create(name, *dims, *metric, *ef_search)?),
        IndexCommand::List => {
            for index in client.vector_indexes()? {
                out.vector_index(&index)?;
            }
            Ok(())
        }
        IndexCommand::Drop { name } => out.vector_index(&client.vector_index_drop(name)?),
    }
}

/// `search`: the hits, best first.
pub(crate) fn search(client: &Client, out: &Output, search: &SearchArgs) -> anyhow::Result<()> {
    let vector = query_vector(&search.query)?;
    if let Some(filter) = &search.filter {
        serde_json::from_str::<serde_json::Value>(filter)
            .with_context(|| format!("--filter {filter:?} is not JSON"))?;
    }
    let query = VectorQuery {
        index: search.index.clone(),
        vector,
        k: search.query.k,
        offset: search.query.offset,
        prefix: Bytes::from(search.prefix.clone().unwrap_or_default()),
        filter: Bytes::from(search.filter.clone().unwrap_or_default()),
        exact: search.query.exact,
        ef_search: 0,
    };
    let hits = client.vector_search(search.context.clone(), query);
    out.vector_hits(&hits.map_err(|error| upgrade_hint(error, 6))?)
}

/// `search-turns`: the turns found, best first.
pub(crate) fn search_turns(
    client: &Client,
    out: &Output,
    search: &SearchTurnsArgs,
) -> anyhow::Result<()> {
    let vector = query_vector(&search.query)?;
    let query = TurnVectorQuery {
        index: search.index.clone(),
        vector,
        k: search.query.k,
        offset: search.query.offset,
        context: search.context.clone(),
        name_prefix: search.name_prefix.clone().unwrap_or_default(),
        tags: search.tags.clone(),
        labels: search.labels.clone(),
        type_tag: search.type_tag,
        exact: search.query.exact,
        ef_search: 0,
    };
    let hits = client.vector_search_turns(query);
    out.turn_hits(&hits.map_err(|error| upgrade_hint(error, 7))?)
}

/// The query from `--vector` or `--vector-file` (a JSON array of numbers).
fn query_vector(query: &QueryArgs) -> anyhow::Result<Vec<f32>> {
    match (&query.vector, &query.vector_file) {
        (Some(vector), _) => Ok(vector.0.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the query vector from {}", path.display()))?;
            serde_json::from_str::<Vec<f32>>(&text)
                .with_context(|| format!("{} is not a JSON array of numbers", path.display()))
        }
        (None, None) => anyhow::bail!("a search needs --vector or --vector-file"),
    }
}

/// An older server answers a message it does not know UNKNOWN_MESSAGE: say which version.
fn upgrade_hint(error: ClientError, version: u16) -> anyhow::Error {
    match error {
        ClientError::Server {
            code: ErrorCode::UnknownMessage,
            ..
        } => anyhow::anyhow!(
            "the server does not speak protocol version {version} (vector search): upgrade it"
        ),
        other => other.into(),
    }
}

impl Output {
    fn vector_index(&self, index: &VectorIndex) -> anyhow::Result<()> {
        let metric = Metric::from_code(index.metric).map_or("unknown", Metric::name);
        if self.json {
            self.line(&json!({
                "index_id": index.index_id,
                "name": index.name,
                "dims": index.dims,
                "metric": metric,
                "ef_search": index.ef_search,
                "vectors": index.vectors,
            }))
        } else {
            self.text(&format!(
                "{} {} dims {} ef_search {} vectors {}",
                readable(&index.name),
                index.dims,
                metric,
                index.ef_search,
                index.vectors
            ))
        }
    }

    fn turn_hits(&self, hits: &TurnHits) -> anyhow::Result<()> {
        for hit in &hits.hits {
            let turn = &hit.turn;
            if self.json {
                self.line(&json!({
                    "turn_id": turn.turn_id,
                    "context_id": turn.context_id,
                    "depth": turn.depth,
                    "type": turn.type_tag,
                    "score": hit.score,
                    "payload_hash": turn.payload_hash.to_hex(),
                    "payload_len": turn.payload_len,
                }))?;
            } else {
                self.text(&format!(
                    "turn {} context {} depth {} type {} {:.6} {} bytes {}",
                    turn.turn_id,
                    turn.context_id,
                    turn.depth,
                    turn.type_tag,
                    hit.score,
                    turn.payload_len,
                    turn.payload_hash
                ))?;
            }
        }
        Ok(())
    }

    fn vector_hits(&self, hits: &VectorHits) -> anyhow::Result<()> {
        for hit in &hits.hits {
            let key = String::from_utf8_lossy(&hit.key);
            if self.json {
                self.line(&json!({
                    "key": key,
                    "score": hit.score,
                    "value_hash": hit.value_hash.to_hex(),
                    "value_len": hit.value_len,
                }))?;
            } else {
                self.text(&format!(
                    "{} {:.6} {} bytes {}",
                    readable(&key),
                    hit.score,
                    hit.value_len,
                    hit.value_hash
                ))?;
            }
        }
        Ok(())
    }
}
