//! Which labels are indexed store-wide (FIND_TURNS looks them up; other labels are filtered per
//! context by the turn log).

/// Whether turns are indexed store-wide by labels with this key: `run_id` (LangGraph's
/// `delete_for_runs`), `thread_id`, and any key starting `idx.` (a caller's opt-in).
pub fn is_indexed_label(key: &str) -> bool {
    matches!(key, "run_id" | "thread_id") || key.starts_with("idx.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_thread_and_idx_keys_are_indexed() {
        for key in ["run_id", "thread_id", "idx.user", "idx."] {
            assert!(is_indexed_label(key), "{key}");
        }
        for key in ["run", "source", "thread", "index.x", ""] {
            assert!(!is_indexed_label(key), "{key}");
        }
    }
}
