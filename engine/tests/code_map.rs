//! The engine's code map, the table in `engine/src/lib.rs`'s header, is the import order of
//! `engine/src`, checked.
//!
//! The table lists every module top to bottom in the order imports flow (formats →
//! file layer → state → views → pipeline and actors → reads → `Engine`): a module uses only
//! modules in its own row or a row above it. The one allowance is a module's own parent: the
//! files under `engine/` are `impl Engine` blocks, the Engine's own methods split by concern.
//! A module missing from the table, or an import that points down the table, fails here, so
//! the map a newcomer reads cannot drift from the code. The crate-wide rules (who writes to
//! the disk, who may read the engine's formats) are checked here too; docs/architecture.md
//! names each of them with this file.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Rows of the engine table in `lib.rs`'s header: each row's module entries
/// (`sequencer/view.rs`, or `format/` for every file of a directory), in table order.
fn table_rows(lib_rs: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for line in lib_rs.lines().filter_map(|line| line.strip_prefix("//! ")) {
        let Some(first_cell) = line.strip_prefix("| ").and_then(|l| l.split(" |").next()) else {
            continue;
        };
        let entries: Vec<String> = first_cell
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|entry| entry.ends_with(".rs") || entry.ends_with('/'))
            .map(str::to_owned)
            .collect();
        if !entries.is_empty() {
            rows.push(entries);
        }
    }
    rows
}

fn source_files(dir: &Path, root: &Path, files: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("engine/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, root, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under engine/src");
            files.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The source a module compiles into release builds: comments and its unit-test module cut.
fn code_of(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let next = next.trim_start();
                next.starts_with("mod ") || next.starts_with("pub(crate) mod ")
            })
        {
            break;
        }
        let line = line.split("//").next().unwrap_or("");
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every path named after `crate::` (groups `crate::{a::{b, c}, d}` expanded).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        expand(rest, Vec::new(), &mut paths);
    }
    paths
}

fn expand(text: &str, prefix: Vec<String>, paths: &mut Vec<Vec<String>>) {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0usize;
        let mut item_start = 0;
        for (i, ch) in group.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(&group[item_start..i], prefix.clone(), paths);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&group[item_start..i], prefix.clone(), paths);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let mut path = prefix;
    let mut segment_text = text;
    loop {
        let ident_len = segment_text
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(segment_text.len());
        if ident_len == 0 {
            break;
        }
        path.push(segment_text[..ident_len].to_owned());
        segment_text = &segment_text[ident_len..];
        match segment_text.strip_prefix("::") {
            Some(after) if after.starts_with('{') => return expand(after, path, paths),
            Some(after) => segment_text = after,
            None => break,
        }
    }
    if !path.is_empty() {
        paths.push(path);
    }
}

/// The module file a path lands in: its longest prefix that is a file.
fn module_of(path: &[String], files: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|len| {
        let joined = path[..len].join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .find(|candidate| files.contains(candidate))
    })
}

fn row_of(file: &str, rows: &[Vec<String>]) -> Option<usize> {
    rows.iter().position(|entries| {
        entries.iter().any(|entry| {
            entry == file || (entry.ends_with('/') && file.starts_with(entry.as_str()))
        })
    })
}

/// `engine/backup.rs` → `engine.rs`; `blob/view.rs` → `blob/mod.rs`.
fn parent_of(file: &str) -> Option<[String; 2]> {
    let (dir, _) = file.rsplit_once('/')?;
    Some([format!("{dir}.rs"), format!("{dir}/mod.rs")])
}

#[test]
fn every_import_points_up_the_code_map() {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib_rs = std::fs::read_to_string(manifest_dir.join("src/lib.rs"))
        .expect("engine/src/lib.rs is readable");
    let rows = table_rows(&lib_rs);
    assert!(rows.len() > 20, "the engine table has its rows: {rows:?}");

    let src = manifest_dir.join("src");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    files.sort();

    let mut problems = Vec::new();
    let mut checked_imports = 0usize;
    for file in &files {
        // The crate root and directories' mod.rs only declare modules.
        let declares_only =
            file == "lib.rs" || file.ends_with("/mod.rs") && row_of(file, &rows).is_none();
        if declares_only {
            continue;
        }
        let Some(row) = row_of(file, &rows) else {
            problems.push(format!(
                "{file} is not in the code map of engine/src/lib.rs"
            ));
            continue;
        };
        let source = std::fs::read_to_string(src.join(file)).expect("a source file");
        let mut imported = BTreeSet::new();
        for path in crate_paths(&code_of(&source)) {
            if let Some(module) = module_of(&path, &files) {
                imported.insert(module);
            }
        }
        for module in imported.iter().filter(|module| *module != file) {
            checked_imports += 1;
            if module == "lib.rs" || parent_of(file).is_some_and(|p| p.contains(module)) {
                continue;
            }
            match row_of(module, &rows) {
                Some(module_row) if module_row <= row => {}
                Some(module_row) => problems.push(format!(
                    "{file} (row {row}) imports {module}, listed below it (row {module_row})"
                )),
                None if module.ends_with("/mod.rs") => {}
                None => problems.push(format!(
                    "{file} imports {module}, which is not in the table"
                )),
            }
        }
    }
    assert!(
        checked_imports > 100,
        "the scan found the imports ({checked_imports})"
    );
    assert!(
        problems.is_empty(),
        "the code map and the imports disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn group_paths_expand() {
    let code = "use crate::{a::{b, c::D}, e};\nlet x = crate::f::g(1);";
    let paths = crate_paths(code);
    let flat: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["a::b", "a::c::D", "e", "f::g"]);
}

/// The standard library's ways to change the disk: a writable handle, a namespace change, a
/// sync, an allocation. Reading (`File::open`, `read_dir`, `metadata`) is anyone's.
const WRITE_CALLS: &[&str] = &[
    "OpenOptions",
    "File::create",
    "fs::write",
    "fs::rename",
    "fs::remove_file",
    "fs::remove_dir",
    "fs::create_dir",
    "fs::hard_link",
    "fs::copy",
    "fs::set_permissions",
    "rustix::fs",
    ".sync_all(",
    ".sync_data(",
];

/// The code map says the file layer (`file/`) is where every byte the engine writes reaches
/// the disk; this holds it to that: no other module calls the standard library's write
/// operations (its unit tests may, to set up damage).
#[test]
fn only_the_file_layer_writes() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    let mut problems = Vec::new();
    for file in files.iter().filter(|file| !file.starts_with("file/")) {
        let code = code_of(&std::fs::read_to_string(src.join(file)).expect("a source file"));
        for (number, line) in code.lines().enumerate() {
            for call in WRITE_CALLS.iter().filter(|call| line.contains(*call)) {
                problems.push(format!("{file}:{}: {call}", number + 1));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "writes outside the file layer (move them into engine/src/file/):\n{}",
        problems.join("\n")
    );
}

/// The replica (`replica/src`) writes into a store's directory and next to it — its record,
/// its upload staging, a restore, a standby's state — so it goes through the file layer too
/// (`ctxstore_engine::files`, issue 36): none of the standard library's write operations, and
/// no sync of a `std::fs::File` (a statement that opens one and syncs it). `WriteFile`'s own
/// `create` and syncs are the file layer's, and allowed.
#[test]
fn the_replica_writes_through_the_file_layer() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../replica/src");
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    assert!(files.iter().any(|file| file == "ship.rs"), "{files:?}");
    let mut problems = Vec::new();
    for file in &files {
        let code = code_of(&std::fs::read_to_string(src.join(file)).expect("a source file"));
        for (number, line) in code.lines().enumerate() {
            let line = line.replace("WriteFile::", "files::");
            let calls = WRITE_CALLS
                .iter()
                .filter(|call| !call.starts_with(".sync_"));
            for call in calls.filter(|call| line.contains(**call)) {
                problems.push(format!("replica/src/{file}:{}: {call}", number + 1));
            }
        }
        for statement in code.split(';') {
            let opens_std = statement.replace("WriteFile::", "").contains("File::open");
            if opens_std && (statement.contains(".sync_all(") || statement.contains(".sync_data("))
            {
                problems.push(format!(
                    "replica/src/{file}: a std::fs::File synced: {}",
                    statement.trim()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the replica writes outside the file layer (use ctxstore_engine::files):\n{}",
        problems.join("\n")
    );
}

/// A message broken over lines without its `\` keeps the next line's indentation inside the
/// string: an operator reads "epoch                  3" (three messages did, one of them the
/// fenced primary's refusal). No string literal in the workspace's sources holds a run of ten
/// spaces between words.
#[test]
fn no_message_keeps_a_lost_line_continuation() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    for krate in [
        "engine", "replica", "server", "cli", "client", "protocol", "vocab", "loadgen",
    ] {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        source_files(&src, &src, &mut files);
        for file in &files {
            let source = std::fs::read_to_string(src.join(file)).expect("a source file");
            for (number, line) in source.lines().enumerate() {
                let line = line.split("//").next().unwrap_or("");
                let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
                if quoted
                    .iter()
                    .any(|text| text.trim().contains("          ") && !text.trim().is_empty())
                {
                    problems.push(format!("{krate}/src/{file}:{}", number + 1));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "string literals holding a lost line continuation (end the line with `\\`): {problems:?}"
    );
}

/// The server and the replica use the engine's API, never its on-disk formats: what they need
/// of them (the slot size, a turn's extras, a record's end in a log) the engine exports
/// (`turns.rs`), so that a format change stays inside the engine (docs/architecture.md).
#[test]
fn the_server_and_the_replica_do_not_import_the_engines_formats() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    for krate in ["server", "replica"] {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        source_files(&src, &src, &mut files);
        assert!(!files.is_empty(), "{krate}/src holds sources");
        for file in &files {
            let code = code_of(&std::fs::read_to_string(src.join(file)).expect("a source file"));
            let flat: String = code.split_whitespace().collect();
            if flat.contains("ctxstore_engine::format") || flat.contains("ctxstore_engine::{format")
            {
                problems.push(format!("{krate}/src/{file}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "these import the engine's format/ (use what the engine exports): {problems:?}"
    );
}

/// The module tables of docs/architecture.md (engine, replica, server) name what each module
/// never imports: `crate::file` (a module of its own crate) or a crate (`object_store`,
/// `ctxstore_engine`, `ctxstore_engine::format`). Each is checked here against the code, so
/// that every "never" of the map is true.
#[test]
fn every_never_import_holds() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let architecture = std::fs::read_to_string(root.join("docs/architecture.md"))
        .expect("docs/architecture.md is readable");
    let mut problems = Vec::new();
    let mut rules = 0usize;
    for section in architecture.split("\n## ").skip(1) {
        let (heading, body) = section.split_once('\n').unwrap_or((section, ""));
        let base = root.join(heading.trim());
        let lines: Vec<&str> = body.lines().filter(|l| l.starts_with("| ")).collect();
        let Some(header) = lines.first() else {
            continue;
        };
        let cells = |line: &str| -> Vec<String> {
            line.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        };
        let Some(column) = cells(header).iter().position(|c| c == "never imports") else {
            continue;
        };
        for line in lines.iter().skip(2) {
            let row = cells(line);
            let ticked = |cell: &str| -> Vec<String> {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            };
            let never = ticked(&row[column]);
            if never.is_empty() {
                assert_eq!(row[column], "—", "a never-imports cell names paths: {line}");
                continue;
            }
            let mut files = Vec::new();
            for module in ticked(&row[0]) {
                let path = base.join(&module);
                if path.is_dir() {
                    let mut inside = Vec::new();
                    source_files(&path, &path, &mut inside);
                    files.extend(inside.into_iter().map(|file| path.join(file)));
                } else {
                    files.push(path);
                }
            }
            assert!(!files.is_empty(), "the row names its modules: {line}");
            for file in &files {
                let code = code_of(&std::fs::read_to_string(file).expect("a source file"));
                let imported: Vec<Vec<String>> = crate_paths(&code);
                let flat: String = code.split_whitespace().collect();
                for forbidden in &never {
                    rules += 1;
                    let breaks = match forbidden.strip_prefix("crate::") {
                        Some(module) => imported.iter().any(|path| path[0] == module),
                        None => {
                            flat.contains(&format!("{forbidden}::"))
                                || flat.contains(&format!("use{forbidden}"))
                                || flat.contains(&format!("{forbidden}::{{"))
                        }
                    };
                    if breaks {
                        problems.push(format!("{} imports {forbidden}", file.display()));
                    }
                }
            }
        }
    }
    assert!(rules > 20, "the never-imports rules are read ({rules})");
    assert!(
        problems.is_empty(),
        "docs/architecture.md says these never import what they do:\n{}",
        problems.join("\n")
    );
}
