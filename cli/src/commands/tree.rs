//! `tree CTX [--depth N] [--since TURN]` (issue 37): a context drawn as the tree of its turns,
//! with the forks and clones that share them, their heads, names and overlay marks
//! (`ctxstore_client::tree`, the same drawing the web console's API serves as JSON).

use ctxstore_client::ContextRef;
use ctxstore_client::blocking::Client;
use ctxstore_client::tree::TreeOptions;

use crate::output::Output;

/// `tree`: reads the turn log without payloads and the previews of the shown turns only.
pub(crate) fn tree(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    depth_max: Option<u32>,
    since: Option<u64>,
) -> anyhow::Result<()> {
    let options = TreeOptions {
        depth_max,
        since,
        ..TreeOptions::default()
    };
    let tree = client.tree(context.clone(), &options)?;
    if out.json {
        out.line(&tree.to_json())
    } else {
        out.text(tree.render_text().trim_end())
    }
}
