//! docs/architecture.md, the code map a newcomer reads first, checked row by row, so that it
//! cannot drift from the code (issue 45): the crate table is the workspace (paths, names and
//! dependencies), every module a table names exists, every rule names the test that enforces
//! it and that test exists, the path sections name functions that exist (engine and server),
//! every crate warns on long functions, and every test file says what it proves (the tests'
//! own headers replace a table of tests).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()))
}

fn architecture() -> String {
    read(&root().join("docs/architecture.md"))
}

/// The `## ` sections of the document, as (heading, body).
fn sections(doc: &str) -> Vec<(&str, &str)> {
    doc.split("\n## ")
        .skip(1)
        .map(|section| section.split_once('\n').unwrap_or((section, "")))
        .collect()
}

/// A table's rows (header and separator left out), each as its cells.
fn table_rows(body: &str) -> Vec<Vec<&str>> {
    body.lines()
        .filter(|line| line.starts_with("| "))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(str::trim)
                .collect::<Vec<_>>()
        })
        .skip(1)
        .filter(|cells| !cells[0].starts_with("---"))
        .collect()
}

/// The backticked words of a cell.
fn ticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// The workspace's members, from the root Cargo.toml.
fn workspace_members() -> BTreeSet<String> {
    let manifest = read(&root().join("Cargo.toml"));
    let start = manifest
        .find("members = [")
        .expect("the workspace lists its members");
    let list = &manifest[start..];
    let list = &list[..list.find(']').expect("the member list ends")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// A member's package name and the workspace crates among its `[dependencies]` (without the
/// `ctxstore-` prefix).
fn package(member: &str) -> (String, BTreeSet<String>) {
    let manifest = read(&root().join(member).join("Cargo.toml"));
    let name = manifest
        .lines()
        .find_map(|line| line.strip_prefix("name = "))
        .expect("a package name")
        .trim_matches('"')
        .to_owned();
    let mut dependencies = BTreeSet::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies && let Some(rest) = line.strip_prefix("ctxstore-") {
            let name = rest.split([' ', '=', '.']).next().unwrap_or(rest);
            dependencies.insert(name.to_owned());
        }
    }
    (name, dependencies)
}

#[test]
fn the_crate_table_is_the_workspace() {
    let doc = architecture();
    let (_, body) = sections(&doc)
        .into_iter()
        .find(|(heading, _)| *heading == "Crates")
        .expect("a section \"Crates\"");
    let mut listed = BTreeSet::new();
    let mut problems = Vec::new();
    for cells in table_rows(body) {
        assert_eq!(
            cells.len(),
            4,
            "crate | path | owns | depends on: {cells:?}"
        );
        let member = ticked(cells[1])
            .next()
            .expect("a path")
            .trim_end_matches('/');
        listed.insert(member.to_owned());
        let (name, dependencies) = package(member);
        if name != cells[0] {
            problems.push(format!(
                "{member} is package {name}, the table says {}",
                cells[0]
            ));
        }
        let said: BTreeSet<String> = cells[3]
            .split(", ")
            .filter(|name| *name != "—")
            .map(str::to_owned)
            .collect();
        if said != dependencies {
            problems.push(format!(
                "{member} depends on {dependencies:?}, the table says {said:?}"
            ));
        }
    }
    let members = workspace_members();
    if listed != members {
        problems.push(format!(
            "the workspace is {members:?}, the table lists {listed:?}"
        ));
    }
    assert!(
        problems.is_empty(),
        "the crate table is wrong:\n{}",
        problems.join("\n")
    );
}

/// A table's first cell names paths: `engine/src/read.rs`, or `_ops.py` (`adk/`) beside the
/// path before it in the cell (a file or a directory). Relative to the section's directory when its heading is one
/// (`## replica/src`), else to the repository.
fn named_paths(heading: &str, first_cell: &str) -> Vec<PathBuf> {
    let base = root().join(if heading.contains('/') { heading } else { "" });
    let mut dir = base.clone();
    let mut paths = Vec::new();
    let path_like = |word: &str| {
        word.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_./-".contains(c))
            && (word.ends_with('/') || word.contains('.'))
    };
    for word in ticked(first_cell).filter(|word| path_like(word)) {
        // `adk/` after `clients/python/ctxstore/_shells.py` is beside it, not at the top.
        let path = if word.contains('/') && base.join(word).exists() {
            base.join(word)
        } else {
            dir.join(word)
        };
        dir = path.parent().map_or(base.clone(), Path::to_path_buf);
        paths.push(path);
    }
    paths
}

#[test]
fn every_module_a_table_names_exists() {
    let doc = architecture();
    let mut problems = Vec::new();
    let mut checked = 0usize;
    for (heading, body) in sections(&doc) {
        if heading == "Rules" {
            continue;
        }
        for cells in table_rows(body) {
            for path in named_paths(heading, cells[0]) {
                checked += 1;
                if !path.exists() {
                    problems.push(format!("{heading}: {} does not exist", path.display()));
                }
            }
        }
    }
    assert!(checked > 60, "the tables name their modules ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_rule_names_a_test_that_exists() {
    let doc = architecture();
    let (_, body) = sections(&doc)
        .into_iter()
        .find(|(heading, _)| *heading == "Rules")
        .expect("a section \"Rules\"");
    let rows = table_rows(body);
    assert!(rows.len() >= 5, "the rules are listed: {rows:?}");
    let mut problems = Vec::new();
    for cells in rows {
        let enforcer = cells.last().expect("a cell");
        let words: Vec<&str> = ticked(enforcer).collect();
        let [file, function] = words[..] else {
            problems.push(format!(
                "\"{enforcer}\" does not name `a file` `and its test`"
            ));
            continue;
        };
        let path = root().join(file);
        let exists = path.exists() && read(&path).contains(&format!("fn {function}("));
        if !exists {
            problems.push(format!("{file} has no test {function}"));
        }
    }
    assert!(
        problems.is_empty(),
        "rules without their test:\n{}",
        problems.join("\n")
    );
}

/// Every function, type and field the path sections name exists: the engine's steps in the
/// engine, the server's in the server (or what it uses).
#[test]
fn the_paths_name_what_exists() {
    let doc = architecture();
    let titles = [
        "The path of an append",
        "The path of a read",
        "The path of a stream delta",
    ];
    let sections = common::doc_paths::sections(&doc, &titles);
    let root = root();
    let mut missing = common::doc_paths::missing(&root, &sections, &["engine/src"], &["vocab/src"]);
    missing.extend(common::doc_paths::missing(
        &root,
        &sections,
        &["server/src"],
        &["engine/src", "protocol/src", "vocab/src"],
    ));
    assert!(
        missing.is_empty(),
        "docs/architecture.md's path sections name what does not exist:\n{}",
        missing.join("\n")
    );
}

/// The crate roots of every member: `src/lib.rs` and `src/main.rs` where they exist.
fn crate_roots() -> Vec<PathBuf> {
    workspace_members()
        .iter()
        .flat_map(|member| ["src/lib.rs", "src/main.rs"].map(|file| root().join(member).join(file)))
        .filter(|path| path.exists())
        .collect()
}

#[test]
fn every_crate_warns_on_long_functions() {
    let roots = crate_roots();
    assert!(roots.len() >= 11, "{roots:?}");
    let quiet: Vec<String> = roots
        .iter()
        .filter(|path| !read(path).contains("#![warn(clippy::too_many_lines)]"))
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        quiet.is_empty(),
        "crate roots without #![warn(clippy::too_many_lines)] (the threshold is in \
         clippy.toml): {quiet:?}"
    );
}

/// Whether a file opens with a header saying what it proves.
fn has_header(path: &Path) -> bool {
    let text = read(path);
    let first = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    match path.extension().and_then(|e| e.to_str()) {
        Some("rs") => first.starts_with("//!"),
        Some("py") => first.starts_with("\"\"\"") || first.starts_with("r\"\"\""),
        _ => first.starts_with("/**") || first.starts_with("//"),
    }
}

fn files_in(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            path.is_file()
                && path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| extensions.contains(&e))
        })
        .collect()
}

#[test]
fn every_test_file_says_what_it_proves() {
    let root = root();
    let mut files = Vec::new();
    for member in workspace_members() {
        files.extend(files_in(&root.join(member).join("tests"), &["rs"]));
    }
    files.extend(
        files_in(&root.join("clients/python/tests"), &["py"])
            .into_iter()
            .filter(|path| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("test_"))
            }),
    );
    files.extend(files_in(&root.join("clients/typescript/test"), &["ts"]));
    files.extend(files_in(&root.join("console/tests"), &["mjs"]));
    assert!(
        files.len() > 100,
        "the test files are found ({})",
        files.len()
    );
    let silent: Vec<String> = files
        .iter()
        .filter(|path| !has_header(path))
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        silent.is_empty(),
        "test files without a header saying what they prove: {silent:?}"
    );
}

/// The decoders of the wire, the disk and the object store read integers through the one
/// little-endian reader (`ctxstore_vocab::le`), never by hand: no `u16`/`u32`/`u64`
/// `from_le_bytes` in the engine's, the protocol's or the replica's sources (unit tests
/// aside).
#[test]
fn every_decoder_reads_through_le() {
    let root = root();
    let mut problems = Vec::new();
    let mut read = 0usize;
    for krate in ["engine/src", "protocol/src", "replica/src"] {
        let mut pending = vec![root.join(krate)];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).expect("a source directory") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                read += 1;
                let source = std::fs::read_to_string(&path).expect("a source file");
                let code = source.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
                for (number, line) in code.lines().enumerate() {
                    let by_hand = ["u16", "u32", "u64"]
                        .iter()
                        .any(|int| line.contains(&format!("{int}::from_le_bytes")));
                    if by_hand && !line.trim_start().starts_with("//") {
                        problems.push(format!("{}:{}", path.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(read > 100, "the sources are read ({read})");
    assert!(
        problems.is_empty(),
        "integers read by hand (use ctxstore_vocab::le): {problems:?}"
    );
}
