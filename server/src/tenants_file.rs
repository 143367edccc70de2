//! The tenants file (`--tenants-file`, decision 0032 §9): TOML, one `[[tenant]]` table per
//! tenant with its name, tokens, rights and quotas, read whole and checked whole. Nothing here
//! holds state: the server reads a file at start and on SIGHUP, and a file that fails a check
//! changes nothing (at start the server refuses to start; on SIGHUP the old one stays).
//!
//! Tokens are kept only as BLAKE3 digests (the form HELLO compares, `connection/hello.rs`):
//! a file may give a token in plain (hashed as it is read, then dropped) or as
//! `blake3:<64 hex digits>`, so that the file need not hold a secret at all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use ctxstore_vocab::limits::{TENANT_NAME_BYTES_MAX, is_tenant_name};

use crate::settings::line_of;

/// The most tenants one file may name.
pub const TENANTS_MAX: usize = 10_000;
/// The most tokens over all tenants: HELLO compares a presented token with every one.
pub const TENANT_TOKENS_MAX: usize = 10_000;
/// A plain token's length: a shorter one is guessable, a longer one is a mistake.
pub const TOKEN_BYTES_MIN: usize = 16;
pub const TOKEN_BYTES_MAX: usize = 1024;
/// The name no file may give: TenantId 0, the `--token-file` token's.
pub const OPERATOR_NAME: &str = "operator";

#[derive(Debug, thiserror::Error)]
pub enum TenantsFileError {
    #[error("reading the tenants file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tenants file {path}, line {line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// What a tenant's tokens may do with the tenant's own data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rights {
    pub read: bool,
    pub write: bool,
    /// Its own contexts' retention and purges; never store-wide operations.
    pub admin: bool,
}

impl Rights {
    /// The rights granted, by the names the tenants file gives them, in that order.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.read, "read"),
            (self.write, "write"),
            (self.admin, "admin"),
        ]
        .into_iter()
        .filter_map(|(granted, name)| granted.then_some(name))
        .collect()
    }
}

/// A tenant's limits; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    pub bytes: Option<u64>,
    pub contexts: Option<u64>,
    pub appends_per_s: Option<u64>,
    pub connections: Option<u64>,
    pub streams: Option<u64>,
}

/// One `[[tenant]]` table, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantEntry {
    pub name: String,
    /// BLAKE3 of each token, in the file's order.
    pub token_digests: Vec<[u8; 32]>,
    pub rights: Rights,
    pub quotas: Quotas,
    /// The line of its `[[tenant]]` header, for messages.
    pub line: usize,
}

/// A tenants file, checked whole: names unique and valid, every token given once over all
/// tenants, every key known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantsFile {
    pub path: PathBuf,
    pub tenants: Vec<TenantEntry>,
}

impl TenantsFile {
    pub fn load(path: &Path) -> Result<TenantsFile, TenantsFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TenantsFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        TenantsFile::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<TenantsFile, TenantsFileError> {
        let invalid = |line: usize, message: String| TenantsFileError::Invalid {
            path: path.to_path_buf(),
            line,
            message,
        };
        let table = DeTable::parse(text).map_err(|error| {
            let line = error.span().map_or(1, |span| line_of(text, span.start));
            invalid(line, error.message().to_string())
        })?;
        let mut tenants = Vec::new();
        for (key, value) in table.get_ref().iter() {
            let line = line_of(text, key.span().start);
            if key.get_ref().as_ref() != "tenant" {
                return Err(invalid(
                    line,
                    format!(
                        "unknown key `{}`: the file holds `[[tenant]]` tables only",
                        key.get_ref()
                    ),
                ));
            }
            let DeValue::Array(items) = value.get_ref() else {
                return Err(invalid(line, "`tenant` must be `[[tenant]]` tables".into()));
            };
            for item in items.iter() {
                let line = line_of(text, item.span().start);
                let DeValue::Table(table) = item.get_ref() else {
                    return Err(invalid(line, "each `[[tenant]]` must be a table".into()));
                };
                let entry =
                    tenant(text, table, line).map_err(|(line, message)| invalid(line, message))?;
                tenants.push(entry);
            }
        }
        check_whole(&tenants).map_err(|(line, message)| invalid(line, message))?;
        Ok(TenantsFile {
            path: path.to_path_buf(),
            tenants,
        })
    }
}

/// Every token digest of a tenants file with its tenant's index in `tenants`: what HELLO
/// will look a presented token up in (decision 0032 §1).
#[derive(Clone, Debug)]
pub struct TokenTable {
    entries: Vec<([u8; 32], u32)>,
}

impl TokenTable {
    pub fn new(file: &TenantsFile) -> TokenTable {
        let entries = file
            .tenants
            .iter()
            .enumerate()
            .flat_map(|(index, entry)| {
                entry
                    .token_digests
                    .iter()
                    .map(move |digest| (*digest, index as u32))
            })
            .collect();
        TokenTable { entries }
    }

    /// The index of the tenant whose token has `digest`. Constant in time: every entry is
    /// compared in constant time, with no early exit, so neither whether a token matched nor
    /// which one did shows in the time HELLO takes (at most `TENANT_TOKENS_MAX` compares).
    pub fn find(&self, digest: &[u8; 32]) -> Option<usize> {
        // One plus the index, or 0; chosen by masks, not branches.
        let mut found = 0_u64;
        for (candidate, index) in &self.entries {
            let matched = u64::from(constant_time_eq::constant_time_eq_32(candidate, digest));
            found |= matched.wrapping_neg() & (u64::from(*index) + 1);
        }
        found.checked_sub(1).map(|index| index as usize)
    }
}

/// A check failed: the line it names and what to fix.
type Failed = (usize, String);

/// One `[[tenant]]` table.
fn tenant(text: &str, table: &DeTable<'_>, header_line: usize) -> Result<TenantEntry, Failed> {
    let mut name = None;
    let mut token_digests = Vec::new();
    let mut rights = None;
    let mut quotas = Quotas::default();
    for (key, value) in table.iter() {
        let line = line_of(text, key.span().start);
        let key = key.get_ref().as_ref();
        let value = value.get_ref();
        let bad = |message: String| (line, format!("`{key}`: {message}"));
        match key {
            "name" => name = Some(tenant_name(value).map_err(bad)?),
            "tokens" => token_digests = tokens(value).map_err(bad)?,
            "rights" => rights = Some(parse_rights(value).map_err(bad)?),
            "quota_bytes" => quotas.bytes = Some(quota(value).map_err(bad)?),
            "quota_contexts" => quotas.contexts = Some(quota(value).map_err(bad)?),
            "quota_appends_per_s" => quotas.appends_per_s = Some(quota(value).map_err(bad)?),
            "quota_connections" => quotas.connections = Some(quota(value).map_err(bad)?),
            "quota_streams" => quotas.streams = Some(quota(value).map_err(bad)?),
            _ => {
                return Err((
                    line,
                    format!(
                        "unknown key `{key}`; a tenant has name, tokens, rights, quota_bytes, \
                         quota_contexts, quota_appends_per_s, quota_connections and \
                         quota_streams"
                    ),
                ));
            }
        }
    }
    let Some(name) = name else {
        return Err((header_line, "a tenant without `name`".into()));
    };
    if token_digests.is_empty() {
        return Err((
            header_line,
            format!("tenant `{name}` has no tokens: give `tokens = [\"…\"]`"),
        ));
    }
    let Some(rights) = rights else {
        return Err((
            header_line,
            format!("tenant `{name}` has no `rights` (read, write, admin)"),
        ));
    };
    Ok(TenantEntry {
        name,
        token_digests,
        rights,
        quotas,
        line: header_line,
    })
}

/// Names unique, tokens unique over all tenants, the limits.
fn check_whole(tenants: &[TenantEntry]) -> Result<(), Failed> {
    if tenants.len() > TENANTS_MAX {
        let line = tenants.get(TENANTS_MAX).map_or(1, |entry| entry.line);
        return Err((line, format!("more than {TENANTS_MAX} tenants")));
    }
    let mut names = BTreeMap::new();
    let mut digests = BTreeSet::new();
    for entry in tenants {
        if let Some(first) = names.insert(entry.name.as_str(), entry.line) {
            return Err((
                entry.line,
                format!(
                    "tenant `{}` is named twice (first at line {first})",
                    entry.name
                ),
            ));
        }
        for digest in &entry.token_digests {
            if !digests.insert(*digest) {
                // Which tenant had it first is not said: the message may reach a log.
                return Err((
                    entry.line,
                    format!(
                        "tenant `{}` has a token given before in this file; every token \
                         belongs to one tenant",
                        entry.name
                    ),
                ));
            }
        }
    }
    if digests.len() > TENANT_TOKENS_MAX {
        return Err((
            1,
            format!("more than {TENANT_TOKENS_MAX} tokens over all tenants"),
        ));
    }
    Ok(())
}

fn string(value: &DeValue<'_>) -> Result<String, String> {
    match value {
        DeValue::String(text) => Ok(text.to_string()),
        _ => Err("expected a string".into()),
    }
}

fn tenant_name(value: &DeValue<'_>) -> Result<String, String> {
    let name = string(value)?;
    let valid = is_tenant_name(&name);
    if !valid {
        return Err(format!(
            "{name:?} is not a tenant name: 1 to {TENANT_NAME_BYTES_MAX} bytes of a-z, 0-9, _ \
             and -"
        ));
    }
    if name == OPERATOR_NAME {
        return Err(format!(
            "`{OPERATOR_NAME}` is the --token-file token's tenant; choose another name"
        ));
    }
    Ok(name)
}

/// Each token as its digest: `blake3:<hex>` as given, a plain one hashed.
fn tokens(value: &DeValue<'_>) -> Result<Vec<[u8; 32]>, String> {
    let DeValue::Array(items) = value else {
        return Err("expected a list of strings".into());
    };
    let mut digests = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let token = string(item.get_ref()).map_err(|error| format!("item {index}: {error}"))?;
        digests.push(token_digest(&token).map_err(|error| format!("item {index}: {error}"))?);
    }
    Ok(digests)
}

/// The digest HELLO compares (`connection::token_digest`).
fn token_digest(token: &str) -> Result<[u8; 32], String> {
    if let Some(hex) = token.strip_prefix("blake3:") {
        let mut digest = [0_u8; 32];
        let valid = hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit());
        if !valid {
            return Err("after `blake3:` come 64 hex digits (the token's BLAKE3)".into());
        }
        for (index, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16)
                .map_err(|error| error.to_string())?;
        }
        return Ok(digest);
    }
    if !(TOKEN_BYTES_MIN..=TOKEN_BYTES_MAX).contains(&token.len()) {
        // The token itself is never repeated in a message.
        return Err(format!(
            "a token of {} bytes; tokens are {TOKEN_BYTES_MIN} to {TOKEN_BYTES_MAX} bytes",
            token.len()
        ));
    }
    Ok(crate::connection::token_digest(token.as_bytes()))
}

fn parse_rights(value: &DeValue<'_>) -> Result<Rights, String> {
    let DeValue::Array(items) = value else {
        return Err("expected a list: [\"read\", \"write\", \"admin\"]".into());
    };
    let mut rights = Rights::default();
    for item in items.iter() {
        let right = string(item.get_ref())?;
        let slot = match right.as_str() {
            "read" => &mut rights.read,
            "write" => &mut rights.write,
            "admin" => &mut rights.admin,
            _ => {
                return Err(format!(
                    "unknown right {right:?}; rights are read, write, admin"
                ));
            }
        };
        if *slot {
            return Err(format!("{right:?} is given twice"));
        }
        *slot = true;
    }
    if rights == Rights::default() {
        return Err("no rights: give at least one of read, write, admin".into());
    }
    Ok(rights)
}

fn quota(value: &DeValue<'_>) -> Result<u64, String> {
    let DeValue::Integer(integer) = value else {
        return Err("expected a whole number".into());
    };
    let digits = integer.as_str().replace('_', "");
    let parsed = u64::from_str_radix(&digits, integer.radix())
        .ok()
        .filter(|&quota| quota > 0);
    parsed.ok_or_else(|| {
        format!(
            "{} is not a quota: a whole number above 0 (leave the key out for no limit)",
            integer.as_str()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TenantsFile, String> {
        TenantsFile::parse(Path::new("tenants.toml"), text).map_err(|error| error.to_string())
    }

    const ACME: &str = r#"
[[tenant]]
name = "acme"
tokens = ["acme-token-0123456789"]
rights = ["read", "write"]
quota_bytes = 10_000_000_000
quota_contexts = 100_000
quota_appends_per_s = 5_000

[[tenant]]
name = "globex"
tokens = ["blake3:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"]
rights = ["read", "write", "admin"]
quota_streams = 16
"#;

    #[test]
    fn a_file_of_two_tenants_reads_back_checked() {
        let file = parse(ACME).unwrap();
        let [acme, globex] = file.tenants.as_slice() else {
            panic!("{file:?}")
        };
        assert_eq!(acme.name, "acme");
        assert_eq!(
            acme.token_digests,
            vec![crate::connection::token_digest(b"acme-token-0123456789")]
        );
        let both = Rights {
            read: true,
            write: true,
            admin: false,
        };
        assert_eq!(acme.rights, both);
        assert_eq!(
            acme.quotas,
            Quotas {
                bytes: Some(10_000_000_000),
                contexts: Some(100_000),
                appends_per_s: Some(5_000),
                connections: None,
                streams: None,
            }
        );
        assert_eq!(acme.line, 2);
        assert_eq!(globex.token_digests[0][..4], [0x00, 0x11, 0x22, 0x33]);
        assert!(globex.rights.admin);
        assert_eq!(globex.quotas.streams, Some(16));
        assert_eq!(globex.line, 10);
    }

    /// Files that fail a check, each with what its message must say.
    fn bad_files() -> Vec<(String, &'static str)> {
        let tenant = |body: &str| format!("[[tenant]]\nname = \"acme\"\n{body}\n");
        let token = "tokens = [\"acme-token-0123456789\"]";
        let cases: Vec<(String, &str)> = vec![
            ("[[tenant]\n".into(), "line 1"),
            ("other = 1\n".into(), "line 1: unknown key `other`"),
            ("tenant = 3\n".into(), "`[[tenant]]` tables"),
            (
                "[[tenant]]\ntokens = [\"x\"]\n".into(),
                "`tokens`: item 0: a token of 1 bytes",
            ),
            (
                "[[tenant]]\nname = \"Acme\"\n".into(),
                "line 2: `name`: \"Acme\" is not",
            ),
            (
                "[[tenant]]\nname = \"operator\"\n".into(),
                "choose another name",
            ),
            (tenant(""), "has no tokens"),
            (tenant(token), "has no `rights`"),
            (tenant(&format!("{token}\nrights = []")), "no rights"),
            (
                tenant(&format!("{token}\nrights = [\"root\"]")),
                "unknown right \"root\"",
            ),
            (
                tenant(&format!("{token}\nrights = [\"read\", \"read\"]")),
                "given twice",
            ),
            (
                tenant(&format!("{token}\nrights = [\"read\"]\nquota_bytes = 0")),
                "line 5: `quota_bytes`: 0 is not a quota",
            ),
            (
                tenant(&format!("{token}\nrights = [\"read\"]\nquota_bytes = -1")),
                "is not a quota",
            ),
            (
                tenant(&format!(
                    "{token}\nrights = [\"read\"]\nquota_bytes = \"1 GB\""
                )),
                "expected a whole number",
            ),
            (
                tenant(&format!("{token}\nrights = [\"read\"]\nquota_disk = 1")),
                "line 5: unknown key `quota_disk`",
            ),
            (
                tenant("tokens = [\"blake3:00\"]\nrights = [\"read\"]"),
                "64 hex digits",
            ),
            (
                "[[tenant]]\nrights = [\"read\"]\n".into(),
                "line 1: a tenant without `name`",
            ),
            (
                format!(
                    "{}{}",
                    tenant(&format!("{token}\nrights = [\"read\"]")),
                    tenant("tokens = [\"another-token-0123456789\"]\nrights = [\"read\"]")
                ),
                "line 5: tenant `acme` is named twice (first at line 1)",
            ),
        ];
        cases
    }

    #[test]
    fn every_bad_file_names_its_line_and_what_is_wrong() {
        for (text, expected) in bad_files() {
            let error = parse(&text).expect_err(&text);
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(
                error.starts_with("tenants file tenants.toml, line "),
                "{error}"
            );
        }
    }

    #[test]
    fn a_token_belongs_to_one_tenant_and_a_message_never_repeats_it() {
        let text = r#"
[[tenant]]
name = "acme"
tokens = ["shared-token-0123456789"]
rights = ["read"]
[[tenant]]
name = "globex"
tokens = ["shared-token-0123456789"]
rights = ["read"]
"#;
        let error = parse(text).unwrap_err();
        assert!(
            error.contains("line 6: tenant `globex` has a token given before"),
            "{error}"
        );
        assert!(!error.contains("shared-token"), "{error}");
        let hashed = format!(
            "[[tenant]]\nname = \"a\"\ntokens = [\"shared-token-0123456789\", \"blake3:{}\"]\n\
             rights = [\"read\"]\n",
            blake3::hash(b"shared-token-0123456789").to_hex()
        );
        assert!(parse(&hashed).unwrap_err().contains("given before"));
        let short = "[[tenant]]\nname = \"a\"\ntokens = [\"short-secret\"]\nrights = [\"read\"]\n";
        assert!(!parse(short).unwrap_err().contains("short-secret"));
    }

    #[test]
    fn a_token_finds_its_tenant_and_another_finds_none() {
        let file = parse(ACME).unwrap();
        let table = TokenTable::new(&file);
        let acme = crate::connection::token_digest(b"acme-token-0123456789");
        assert_eq!(table.find(&acme), Some(0));
        assert_eq!(table.find(&file.tenants[1].token_digests[0]), Some(1));
        assert_eq!(
            table.find(&crate::connection::token_digest(b"no such token here")),
            None
        );
        assert_eq!(TokenTable::new(&parse("").unwrap()).find(&acme), None);
    }

    #[test]
    fn an_empty_file_names_no_tenant() {
        assert_eq!(parse("").unwrap().tenants, Vec::new());
        assert_eq!(parse("# no tenants yet\n").unwrap().tenants, Vec::new());
    }
}
