//! `index …` and `search`: vector search (protocol version 6, decision 0033) as clap parses
//! it, with the parser of a vector given on the command line.

use std::path::PathBuf;

use clap::Subcommand;
use ctxstore_client::{ContextRef, Metric};

use super::parse_context;

#[derive(Subcommand, Debug)]
pub(crate) enum IndexCommand {
    /// Create a vector index of your tenant (or print the one of that name, when its
    /// dimension and metric are these). Prints index_id, name, dims, metric, ef_search,
    /// vectors.
    Create {
        /// The index's name (1..=64 bytes).
        name: String,
        /// Dimension of its vectors (1..=4096).
        #[arg(long)]
        dims: u16,
        /// cosine (score: cosine similarity), inner_product (the dot product) or l2 (−the
        /// Euclidean distance): higher is nearer for all three.
        #[arg(long, default_value = "cosine", value_parser = parse_metric)]
        metric: Metric,
        /// The graph's search breadth (0: the server's default, 128).
        #[arg(long, default_value_t = 0)]
        ef_search: u16,
    },
    /// Your tenant's vector indexes, one per line, with their live vectors.
    List,
    /// Drop a vector index: its vectors answer no search from then on (entries keep their
    /// values). A name with no index exits 3 (NOT_FOUND).
    Drop {
        /// The index's name.
        name: String,
    },
}

/// `search`'s arguments (a command of its own: `ctxstore search CONTEXT INDEX …`).
#[derive(clap::Args, Debug)]
pub(crate) struct SearchArgs {
    /// Context whose key-value entries are searched: a ContextID, or @NAME.
    #[arg(value_parser = parse_context)]
    pub context: ContextRef,
    /// The vector index.
    pub index: String,
    #[command(flatten)]
    pub query: QueryArgs,
    /// Only entries whose key starts with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only entries whose value (JSON) passes this filter: LangGraph's, e.g.
    /// '{"kind": "note", "score": {"$gte": 3}}' ($eq, $ne, $gt, $gte, $lt, $lte).
    #[arg(long)]
    pub filter: Option<String>,
}

/// What `search` and `search-turns` share: the query, how many hits, and the plan.
#[derive(clap::Args, Debug)]
pub(crate) struct QueryArgs {
    /// The query: comma-separated numbers (`0.1,-0.3,…`).
    #[arg(long, value_parser = parse_vector, required_unless_present = "vector_file",
        allow_hyphen_values = true)]
    pub vector: Option<VectorArg>,
    /// The query from a file: a JSON array of numbers.
    #[arg(long, conflicts_with = "vector")]
    pub vector_file: Option<PathBuf>,
    /// Hits wanted (1..=1000).
    #[arg(short, long, default_value_t = 10)]
    pub k: u16,
    /// Hits skipped before the k answered.
    #[arg(long, default_value_t = 0)]
    pub offset: u16,
    /// Compare every candidate exactly, never walking the index's graph (by default the
    /// server walks it past 10,000 candidates).
    #[arg(long)]
    pub exact: bool,
}

/// `search-turns`' arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct SearchTurnsArgs {
    /// The vector index.
    pub index: String,
    #[command(flatten)]
    pub query: QueryArgs,
    /// Only this context's turns (a ContextID, or @NAME): its chain as a read returns it.
    #[arg(long, value_parser = parse_context)]
    pub context: Option<ContextRef>,
    /// Only the turns of contexts whose name starts with this.
    #[arg(long)]
    pub name_prefix: Option<String>,
    /// Only the turns of contexts carrying this tag KEY=VALUE (repeat: every one).
    #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = super::parse_tag)]
    pub tags: Vec<(String, String)>,
    /// Only turns carrying this label KEY=VALUE (repeat: every one; at most 16).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = super::parse_tag)]
    pub labels: Vec<(String, String)>,
    /// Only turns of this type tag.
    #[arg(long = "type")]
    pub type_tag: Option<u64>,
}

pub(crate) fn parse_metric(text: &str) -> Result<Metric, String> {
    Metric::from_name(text)
        .ok_or_else(|| format!("{text:?} is not a metric: cosine, inner_product or l2"))
}

/// A vector given on the command line (a type of its own: clap reads a bare `Vec` as several
/// values).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct VectorArg(pub Vec<f32>);

/// A vector written as comma-separated numbers, every one finite.
pub(crate) fn parse_vector(text: &str) -> Result<VectorArg, String> {
    let vector = text
        .split(',')
        .map(|part| {
            let number: f32 = part
                .trim()
                .parse()
                .map_err(|_| format!("{part:?} is not a number"))?;
            if number.is_finite() {
                Ok(number)
            } else {
                Err(format!("{part:?} is not finite"))
            }
        })
        .collect::<Result<Vec<f32>, String>>()?;
    if vector.is_empty() || vector.len() > ctxstore_vocab::vectors::VECTOR_DIMS_MAX {
        return Err("a vector has 1 to 4096 components".into());
    }
    Ok(VectorArg(vector))
}
