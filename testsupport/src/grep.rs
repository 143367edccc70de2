//! The at-rest tests' grep (issue 48): which files under a directory hold given bytes, so a
//! test asserts that a payload's marker is nowhere on the disk in plain text.

use std::path::Path;

/// Every file under `dir` (recursively) whose bytes contain `needle`, by path; a file that
/// cannot be read fails the test that asked.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    assert!(!needle.is_empty(), "an empty needle is in every file");
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let entries = std::fs::read_dir(&at)
            .unwrap_or_else(|error| panic!("listing {}: {error}", at.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|error| panic!("listing {}: {error}", at.display()))
                .path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
            if bytes.windows(needle.len()).any(|window| window == needle) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}
