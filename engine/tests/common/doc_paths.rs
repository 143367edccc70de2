//! Checks that the functions a document's *path* sections name exist (docs/architecture.md,
//! "The path of an append", "The path of a read"): generic over the document, its sections and
//! the crates checked, so that each crate's tests check the steps that lie in it.
//!
//! The sections are numbered steps, each read as file mentions followed by what they hold: a
//! backticked path ending in `.rs` (`engine/src/engine/append.rs`, or `blob/shard.rs` relative
//! to the crate last named in the step) sets the crate; then each backticked identifier must
//! be defined in that crate — a `Type::member` as a type and a `fn member` (or a field,
//! constant or enum variant of that name), a bare `snake_case` name as a `fn`, field or
//! constant, a bare `CamelCase` name as a type or an enum variant. File names (`turns.log`),
//! prose, and what a step names before its first file mention are left alone.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The sections of `doc` whose heading (`## …`) is one of `titles`.
pub fn sections<'a>(doc: &'a str, titles: &[&str]) -> Vec<&'a str> {
    titles
        .iter()
        .map(|title| {
            let heading = format!("## {title}\n");
            let start = doc
                .find(&heading)
                .unwrap_or_else(|| panic!("the document has a section \"{title}\""));
            let body = &doc[start + heading.len()..];
            &body[..body.find("\n## ").unwrap_or(body.len())]
        })
        .collect()
}

/// The numbered steps of a section (`1. …`), each with its continuation lines; text before the
/// first step is one more.
fn steps_of(section: &str) -> Vec<String> {
    let mut steps = vec![String::new()];
    for line in section.lines() {
        let numbered = line.split_once(". ").is_some_and(|(number, _)| {
            !number.is_empty() && number.chars().all(|c| c.is_ascii_digit())
        });
        if numbered {
            steps.push(String::new());
        }
        if let Some(step) = steps.last_mut() {
            step.push_str(line);
            step.push('\n');
        }
    }
    steps
}

/// Every `.rs` file under `dir`, read.
fn crate_sources(dir: &Path) -> String {
    let mut text = String::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path).expect("a source file"));
                text.push('\n');
            }
        }
    }
    text
}

/// Whether `source` defines the identifier: a function, a field or parameter (`name:`), a
/// constant or static.
fn defines_value(source: &str, name: &str) -> bool {
    [
        format!("fn {name}("),
        format!("fn {name}<"),
        format!(" {name}: "),
        format!("const {name}:"),
        format!("static {name}:"),
    ]
    .iter()
    .any(|pattern| source.contains(pattern.as_str()))
}

/// Whether `source` defines the type (struct, enum, trait, alias) or an enum variant so named.
fn defines_type(source: &str, name: &str) -> bool {
    let a_type = ["struct", "enum", "trait", "type"].iter().any(|kind| {
        [" ", "<", " {", "(", ";"]
            .iter()
            .any(|after| source.contains(&format!("{kind} {name}{after}")))
    });
    a_type
        || [" {", "(", ","]
            .iter()
            .any(|after| source.contains(&format!("\n    {name}{after}")))
}

/// What a backticked token names, if it names code.
enum Token<'a> {
    File(&'a str),
    Member(&'a str, &'a str),
    Variant(&'a str, &'a str),
    Value(&'a str),
    Type(&'a str),
    Other,
}

fn classify(token: &str) -> Token<'_> {
    let is_ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    if token.ends_with(".rs") && !token.contains(' ') {
        return Token::File(token);
    }
    if let Some((owner, member)) = token.rsplit_once("::") {
        let owner = owner.rsplit("::").next().unwrap_or(owner);
        if is_ident(owner) && is_ident(member) && owner.starts_with(char::is_uppercase) {
            if member.starts_with(char::is_uppercase) {
                return Token::Variant(owner, member);
            }
            return Token::Member(owner, member);
        }
        return Token::Other;
    }
    if !is_ident(token) {
        return Token::Other;
    }
    if token.starts_with(char::is_uppercase) {
        // ALL_CAPS: a constant.
        if token.chars().all(|c| !c.is_ascii_lowercase()) {
            return Token::Value(token);
        }
        return Token::Type(token);
    }
    Token::Value(token)
}

/// The names in `sections` (see the module doc) that the crates in `checked` (source roots
/// relative to `root`, e.g. `engine/src`) do not define, as "`token` (crate)". A name may
/// also be defined in one of `dependencies` (source roots the checked crates use: a server
/// step names engine types). A token under a crate not in `checked` is not looked at.
pub fn missing(
    root: &Path,
    sections: &[&str],
    checked: &[&str],
    dependencies: &[&str],
) -> Vec<String> {
    let mut sources: HashMap<String, String> = HashMap::new();
    let mut problems = Vec::new();
    let mut checked_names = 0usize;
    let steps = sections.iter().flat_map(|section| steps_of(section));
    for step in steps {
        let mut crate_root: Option<&str> = None;
        let tokens = step.split('`').skip(1).step_by(2);
        for token in tokens {
            let name = match classify(token) {
                Token::File(file) => {
                    if let Some(root) = checked.iter().find(|root| file.starts_with(*root)) {
                        crate_root = Some(root);
                    } else if file.contains("/src/") {
                        crate_root = None;
                    }
                    if let Some(root_dir) = crate_root {
                        let relative = file.strip_prefix(root_dir).unwrap_or(file);
                        let path: PathBuf =
                            root.join(root_dir).join(relative.trim_start_matches('/'));
                        if !path.exists() {
                            problems.push(format!("`{file}` ({root_dir}): no such file"));
                        }
                    }
                    continue;
                }
                other => other,
            };
            let Some(crate_dir) = crate_root else {
                continue;
            };
            let source = sources.entry(crate_dir.to_string()).or_insert_with(|| {
                std::iter::once(crate_dir)
                    .chain(dependencies.iter().copied())
                    .map(|dir| crate_sources(&root.join(dir)))
                    .collect()
            });
            let found = match name {
                Token::Member(owner, member) => {
                    defines_type(source, owner) && defines_value(source, member)
                }
                Token::Variant(owner, variant) => {
                    defines_type(source, owner) && defines_type(source, variant)
                }
                Token::Value(value) => defines_value(source, value),
                Token::Type(name) => defines_type(source, name),
                Token::File(_) | Token::Other => continue,
            };
            checked_names += 1;
            if !found {
                problems.push(format!("`{token}` ({crate_dir})"));
            }
        }
    }
    assert!(
        checked_names > 0 || checked.is_empty(),
        "the path sections name something in {checked:?}"
    );
    problems
}
