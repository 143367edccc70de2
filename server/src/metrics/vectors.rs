//! The vector indexes' graphs (decision 0033 §4), summed over every index of every tenant:
//! whether searches walk them or scan exactly, how far the graphs' writer is behind, their
//! memory and their rebuilds after churn. Sums keep the cardinality at one series each,
//! whatever the number of indexes.

use ctxstore_engine::vectors::VectorGraphsSummary;
use prometheus::proto::{MetricFamily, MetricType};

use super::{MetricsSource, counter, family, gauge};

impl MetricsSource {
    pub(super) fn gather_vectors(&self, families: &mut Vec<MetricFamily>) {
        vector_families(&self.engine.vector_graphs_summary(), families);
    }
}

/// A series: its name, its help, its type, its figure.
type GraphSeries = (
    &'static str,
    &'static str,
    MetricType,
    fn(&VectorGraphsSummary) -> u64,
);

fn vector_families(summary: &VectorGraphsSummary, families: &mut Vec<MetricFamily>) {
    let series: [GraphSeries; 7] = [
        (
            "ctxstore_vector_indexes",
            "Live vector indexes, every tenant's.",
            MetricType::GAUGE,
            |summary| summary.indexes,
        ),
        (
            "ctxstore_vector_graphs_not_ready",
            "Vector indexes whose graph is not ready (built at open, or dropped after a \
             failure): their searches compare every candidate exactly.",
            MetricType::GAUGE,
            |summary| summary.not_ready,
        ),
        (
            "ctxstore_vector_graph_vectors",
            "Vectors in the ready graphs.",
            MetricType::GAUGE,
            |summary| summary.vectors,
        ),
        (
            "ctxstore_vector_graph_pending",
            "Vectors blobs added by writes the graphs' writer has not applied yet (searched \
             exactly meanwhile).",
            MetricType::GAUGE,
            |summary| summary.pending,
        ),
        (
            "ctxstore_vector_graph_memory_bytes",
            "Memory of the ready graphs (usearch's count as of each graph's last growth).",
            MetricType::GAUGE,
            |summary| summary.memory_bytes,
        ),
        (
            "ctxstore_vector_graph_rebuilds_total",
            "Graphs built anew after churn since the server started.",
            MetricType::COUNTER,
            |summary| summary.rebuilds,
        ),
        (
            "ctxstore_vector_graph_rebuilding",
            "Graphs being built anew after churn now (each doubles its index's graph memory).",
            MetricType::GAUGE,
            |summary| summary.rebuilding,
        ),
    ];
    for (name, help, kind, value) in series {
        let figure = value(summary);
        let metric = if kind == MetricType::COUNTER {
            counter::<&str>(&[], figure)
        } else {
            gauge::<&str>(&[], figure as f64)
        };
        families.push(family(name, help, kind, vec![metric]));
    }
}
