//! The sweep (decision 0011): after the fence, each condemned blob leaves its shard's index by
//! compare-and-set (`Condemned`: a blob something named since is kept), manifests first,
//! level by level (decision 0013), so that a swept chunk implies a swept manifest.

use std::sync::Arc;

use crate::blob::condemned::Condemned;
use crate::error::EngineError;
use crate::gc::Collector;
use crate::gc::condemn::{PackPlan, Verdict};
use crate::ids::BlobHash;
use crate::pipeline::{ShardRequest, SweptBlobs};

impl Collector {
    /// The condemned manifests, level by level, in every pack: before any other blob.
    pub(super) fn sweep_manifests(&self, verdict: &Verdict) -> Result<u64, EngineError> {
        let mut swept = 0;
        for level in &verdict.sweep_first {
            for plan in &verdict.plans {
                let hashes: Vec<BlobHash> = plan
                    .dead
                    .iter()
                    .filter(|hash| level.contains(*hash))
                    .copied()
                    .collect();
                if !hashes.is_empty() {
                    swept += self.sweep(plan, hashes, &verdict.condemned)?.blobs;
                }
            }
        }
        Ok(swept)
    }

    /// Sweeps `hashes` of `plan`'s pack out of its shard's index.
    pub(super) fn sweep(
        &self,
        plan: &PackPlan,
        hashes: Vec<BlobHash>,
        condemned: &Arc<Condemned>,
    ) -> Result<SweptBlobs, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.shards[usize::from(plan.shard)]
            .send(ShardRequest::GcSweep {
                pack_id: plan.pack_id,
                hashes,
                condemned: condemned.clone(),
                reply,
            })
            .map_err(|_| EngineError::ShutDown)?;
        answer.recv().map_err(|_| EngineError::ShutDown)
    }
}
