//! `index create/list/drop` and `search`: vector search (protocol version 6, decision 0033).

use anyhow::Context;
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{ClientError, ErrorCode, Metric, VectorHits, VectorIndex, VectorQuery};
use serde_json::json;

use crate::args::{IndexCommand, SearchArgs};
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
    let vector = match (&search.vector, &search.vector_file) {
        (Some(vector), _) => vector.0.clone(),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the query vector from {}", path.display()))?;
            serde_json::from_str::<Vec<f32>>(&text)
                .with_context(|| format!("{} is not a JSON array of numbers", path.display()))?
        }
        (None, None) => anyhow::bail!("search needs --vector or --vector-file"),
    };
    if let Some(filter) = &search.filter {
        serde_json::from_str::<serde_json::Value>(filter)
            .with_context(|| format!("--filter {filter:?} is not JSON"))?;
    }
    let query = VectorQuery {
        index: search.index.clone(),
        vector,
        k: search.k,
        offset: search.offset,
        prefix: Bytes::from(search.prefix.clone().unwrap_or_default()),
        filter: Bytes::from(search.filter.clone().unwrap_or_default()),
        exact: search.exact,
        ef_search: 0,
    };
    let hits = client.vector_search(search.context.clone(), query);
    let hits = hits.map_err(|error| match error {
        ClientError::Server {
            code: ErrorCode::UnknownMessage,
            ..
        } => anyhow::anyhow!(
            "the server does not speak protocol version 6 (vector search): upgrade it"
        ),
        other => other.into(),
    })?;
    out.vector_hits(&hits)
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
