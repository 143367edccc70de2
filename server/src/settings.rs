//! Where each server setting comes from: one table — the server's command-line flags (a clap
//! `Command`) — read from four layers, highest first:
//!
//! 1. the flag on the command line (`--network-cores 2`);
//! 2. the environment variable `CTXSTORE_<FLAG>` (`CTXSTORE_NETWORK_CORES=2`);
//! 3. the `--config` file, TOML, the flag's name as the key (`network-cores = 2`);
//! 4. the built-in default.
//!
//! A file value becomes the flag's default (clap already ranks the command line over the
//! environment over defaults), after being checked by the flag's own parser, so that a bad
//! value names the file and line. Keys that are not flags are errors naming the key and line.
//! `effective` reports every setting's value and where it came from (`--print-config`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use toml::de::{DeTable, DeValue};

/// Prefix of the environment variable of every setting.
pub const ENV_PREFIX: &str = "CTXSTORE_";

/// Flags that are not settings: never read from the file or the environment.
const NOT_SETTINGS: &[&str] = &["help", "version", "config", "print_config"];

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error(
        "config file {path}, line {line}: unknown setting `{key}`; the keys are the flags of \
         `ctxstore-server --help` without the leading `--`{hint}"
    )]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        hint: String,
    },
    #[error("config file {path}, line {line}: `{key}`: {message}")]
    BadValue {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
}

/// The settings of a config file, each checked by its flag's parser.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    pub path: PathBuf,
    /// By flag id: the value(s), as they would be written after the flag, and the line.
    values: BTreeMap<String, (Vec<String>, usize)>,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(String),
    File {
        path: PathBuf,
        line: usize,
    },
    Default,
    /// No value and no default (an optional setting left out).
    Unset,
    /// Left out, and worked out at start from other settings or the machine: the value shown
    /// is the one the server uses, printed as a comment so that the printed file does not pin
    /// it (the reason says how it is worked out).
    Derived(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("command line"),
            Source::Env(name) => write!(f, "environment {name}"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("unset"),
            Source::Derived(reason) => write!(f, "not set: {reason}"),
        }
    }
}

/// One setting's effective value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// The flag's long name, which is also its key in the file.
    pub key: String,
    pub values: Vec<String>,
    /// The setting takes a list (printed as a TOML array even with one element).
    pub list: bool,
    pub source: Source,
}

fn is_setting(arg: &Arg) -> bool {
    !arg.is_positional()
        && !NOT_SETTINGS.contains(&arg.get_id().as_str())
        && arg.get_long().is_some()
}

/// The environment variable of a setting: `CTXSTORE_` and the flag, upper case, `_` for `-`.
pub fn env_name(arg: &Arg) -> String {
    format!("{ENV_PREFIX}{}", arg.get_id().as_str().to_uppercase())
}

/// Gives every setting of `command` its `CTXSTORE_<FLAG>` environment variable.
pub fn with_env(command: Command) -> Command {
    let ids: Vec<_> = command
        .get_arguments()
        .filter(|arg| is_setting(arg))
        .map(|arg| (arg.get_id().clone(), env_name(arg)))
        .collect();
    ids.into_iter().fold(command, |command, (id, env)| {
        command.mut_arg(id, |arg| arg.env(env))
    })
}

impl ConfigFile {
    /// Reads and checks `path` against the settings of `command`.
    pub fn load(path: &Path, command: &Command) -> Result<ConfigFile, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ConfigFile::parse(path, &text, command)
    }

    pub fn parse(path: &Path, text: &str, command: &Command) -> Result<ConfigFile, SettingsError> {
        let table = DeTable::parse(text).map_err(|error| SettingsError::Syntax {
            path: path.to_path_buf(),
            message: match error.span() {
                Some(span) => format!("line {}: {}", line_of(text, span.start), error.message()),
                None => error.message().to_string(),
            },
        })?;
        let settings: Vec<&Arg> = command
            .get_arguments()
            .filter(|arg| is_setting(arg))
            .collect();
        let mut values = BTreeMap::new();
        for (key, value) in table.get_ref().iter() {
            let line = line_of(text, key.span().start);
            let key = key.get_ref().as_ref();
            let Some(arg) = settings.iter().find(|arg| arg.get_long() == Some(key)) else {
                return Err(SettingsError::UnknownKey {
                    path: path.to_path_buf(),
                    line,
                    key: key.to_string(),
                    hint: hint(key, &settings),
                });
            };
            let bad = |message: String| SettingsError::BadValue {
                path: path.to_path_buf(),
                line,
                key: key.to_string(),
                message,
            };
            let raw = raw_values(value.get_ref()).map_err(bad)?;
            check(arg, &raw).map_err(bad)?;
            values.insert(arg.get_id().as_str().to_string(), (raw, line));
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            values,
        })
    }

    /// `command` with this file's values as the defaults of their flags.
    pub fn apply(&self, command: Command) -> Command {
        self.values.iter().fold(command, |command, (id, (raw, _))| {
            let raw = raw.clone();
            command.mut_arg(id, move |arg| arg.default_values(raw))
        })
    }

    fn line_of(&self, id: &str) -> Option<usize> {
        self.values.get(id).map(|(_, line)| *line)
    }
}

/// 1-based line of byte `offset` in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count()
        + 1
}

/// The closest settings to an unknown key, if any is close.
fn hint(key: &str, settings: &[&Arg]) -> String {
    let normalized = key.replace('_', "-").to_lowercase();
    let close: Vec<&str> = settings
        .iter()
        .filter_map(|arg| arg.get_long())
        .filter(|long| {
            *long == normalized
                || long.contains(normalized.as_str())
                || (normalized.len() >= 4 && normalized.contains(long))
        })
        .collect();
    if close.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", close.join(", "))
    }
}

/// A TOML value as the text(s) that would follow its flag.
fn raw_values(value: &DeValue) -> Result<Vec<String>, String> {
    let scalar = |value: &DeValue| -> Result<String, String> {
        match value {
            DeValue::String(text) => Ok(text.to_string()),
            DeValue::Integer(integer) => {
                let digits = integer.as_str().replace('_', "");
                i128::from_str_radix(&digits, integer.radix())
                    .map(|number| number.to_string())
                    .map_err(|error| format!("{integer} is not an integer: {error}"))
            }
            DeValue::Float(float) => Ok(float.as_str().to_string()),
            DeValue::Boolean(flag) => Ok(flag.to_string()),
            DeValue::Datetime(_) => Err("a date is not a valid value here".into()),
            DeValue::Array(_) | DeValue::Table(_) => {
                Err("expected a string, a number or a boolean".into())
            }
        }
    };
    match value {
        DeValue::Array(items) => items.iter().map(|item| scalar(item.get_ref())).collect(),
        DeValue::Table(_) => Err("expected a value, found a table (settings are top-level \
                                  keys, no [sections])"
            .into()),
        other => scalar(other).map(|text| vec![text]),
    }
}

/// Runs `raw` through the flag's own parser, as if it had been given on the command line.
fn check(arg: &Arg, raw: &[String]) -> Result<(), String> {
    let long = arg.get_long().unwrap_or_default();
    let is_switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    if is_switch {
        return match raw {
            [value] if value == "true" || value == "false" => Ok(()),
            _ => Err("expected true or false".into()),
        };
    }
    if raw.len() != 1 && !takes_list(arg) {
        return Err("expected one value, found a list".into());
    }
    let argv: Vec<OsString> = match arg.get_value_delimiter() {
        Some(delimiter) => vec![format!("--{long}={}", raw.join(&delimiter.to_string())).into()],
        None => raw
            .iter()
            .map(|value| format!("--{long}={value}").into())
            .collect(),
    };
    let probe = Command::new("ctxstore-server")
        .no_binary_name(true)
        .disable_help_flag(true)
        .arg(arg.clone().env(None::<&str>).required(false));
    probe
        .try_get_matches_from(argv)
        .map(drop)
        .map_err(|error| first_line(&error.to_string()))
}

fn takes_list(arg: &Arg) -> bool {
    arg.get_num_args()
        .is_some_and(|range| range.max_values() > 1)
        || arg.get_value_delimiter().is_some()
        || matches!(arg.get_action(), ArgAction::Append)
}

fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    line.trim_start_matches("error: ").trim().to_string()
}

/// Every setting's value and source, in the order `command` lists them (pass the command
/// before `with_env`/`apply`, which reorder its arguments).
pub fn effective(
    command: &Command,
    matches: &ArgMatches,
    file: Option<&ConfigFile>,
) -> Vec<Effective> {
    command
        .get_arguments()
        .filter(|arg| is_setting(arg))
        .map(|arg| {
            let id = arg.get_id().as_str();
            let values: Vec<String> = matches
                .get_raw(id)
                .map(|raw| {
                    raw.map(|value| value.to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            let source = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => Source::Flag,
                Some(ValueSource::EnvVariable) => Source::Env(env_name(arg)),
                Some(ValueSource::DefaultValue) => {
                    match file.and_then(|file| Some((file, file.line_of(id)?))) {
                        Some((file, line)) => Source::File {
                            path: file.path.clone(),
                            line,
                        },
                        None => Source::Default,
                    }
                }
                _ => Source::Unset,
            };
            Effective {
                key: arg.get_long().unwrap_or(id).to_string(),
                values,
                list: takes_list(arg),
                source,
            }
        })
        .collect()
}

/// The effective settings as a TOML config file, each line commented with its source: the
/// output of `--print-config` can be saved and used as `--config`.
pub fn render(settings: &[Effective]) -> String {
    let width = settings
        .iter()
        .map(|setting| setting.key.len() + toml_value(setting).len() + 3)
        .max()
        .unwrap_or(0);
    let mut text = String::from(
        "# ctxstore-server effective configuration. Precedence: command line > environment \
         (CTXSTORE_<FLAG>) > config file > default.\n",
    );
    for setting in settings {
        let line = match setting.source {
            Source::Unset => format!("# {} =", setting.key),
            Source::Derived(_) => format!("# {} = {}", setting.key, toml_value(setting)),
            _ => format!("{} = {}", setting.key, toml_value(setting)),
        };
        text.push_str(&format!("{line:<width$}  # {}\n", setting.source));
    }
    text
}

/// A value as TOML: plain decimal numbers and booleans bare, everything else quoted (so that
/// `umask = "077"` keeps its leading zero), lists as arrays.
fn toml_value(setting: &Effective) -> String {
    let one = |value: &String| {
        let bare = value == "true"
            || value == "false"
            || (value == "0"
                || (!value.starts_with('0')
                    && !value.is_empty()
                    && value.bytes().all(|byte| byte.is_ascii_digit())));
        if bare {
            value.clone()
        } else {
            format!("{value:?}")
        }
    };
    match &setting.values[..] {
        [single] if !setting.list => one(single),
        many => format!("[{}]", many.iter().map(one).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    fn command() -> Command {
        Command::new("test")
            .arg(
                Arg::new("listen")
                    .long("listen")
                    .default_value("127.0.0.1:7411"),
            )
            .arg(
                Arg::new("network_cores")
                    .long("network-cores")
                    .value_parser(clap::value_parser!(usize)),
            )
            .arg(
                Arg::new("idle_timeout")
                    .long("idle-timeout")
                    .default_value("5m")
                    .value_parser(|text: &str| crate::config::parse_duration(text)),
            )
            .arg(
                Arg::new("cpus")
                    .long("cpus")
                    .value_delimiter(',')
                    .value_parser(clap::value_parser!(usize)),
            )
            .arg(Arg::new("repair").long("repair").action(ArgAction::SetTrue))
            .arg(Arg::new("config").long("config"))
    }

    fn parse(text: &str) -> Result<ConfigFile, SettingsError> {
        ConfigFile::parse(Path::new("/etc/ctxstore.toml"), text, &command())
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key_and_line() {
        let error = parse("listen = \"127.0.0.1:1\"\n\nnetwork-core = 2\n").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("/etc/ctxstore.toml, line 3: unknown setting `network-core`"),
            "{message}"
        );
        assert!(message.contains("did you mean network-cores?"), "{message}");

        let message = parse("# comment\nnetwork-cores = \"two\"\n")
            .unwrap_err()
            .to_string();
        assert!(message.contains("line 2: `network-cores`"), "{message}");
        assert!(message.contains("two"), "{message}");

        let message = parse("idle-timeout = 3\n").unwrap_err().to_string();
        assert!(message.contains("line 1: `idle-timeout`"), "{message}");

        let message = parse("repair = \"yes\"\n").unwrap_err().to_string();
        assert!(message.contains("expected true or false"), "{message}");

        let message = parse("[server]\nlisten = \"x\"\n").unwrap_err().to_string();
        assert!(
            message.contains("line 1: `server`") || message.contains("unknown setting `server`"),
            "{message}"
        );

        let message = parse("config = \"/x\"\n").unwrap_err().to_string();
        assert!(message.contains("unknown setting `config`"), "{message}");

        let message = parse("listen = \n").unwrap_err().to_string();
        assert!(
            message.contains("not valid TOML") && message.contains("line 1"),
            "{message}"
        );
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let file =
            parse("network-cores = 3\nidle-timeout = \"1m\"\ncpus = [0, 1]\nrepair = true\n")
                .unwrap();
        let command = file.apply(command());
        let matches = command
            .clone()
            .try_get_matches_from(["test", "--network-cores", "5"])
            .unwrap();
        let settings = effective(&command, &matches, Some(&file));
        let find = |key: &str| settings.iter().find(|s| s.key == key).unwrap().clone();
        assert_eq!(find("network-cores").values, vec!["5"]);
        assert_eq!(find("network-cores").source, Source::Flag);
        assert_eq!(find("idle-timeout").values, vec!["1m"]);
        assert_eq!(
            find("idle-timeout").source,
            Source::File {
                path: "/etc/ctxstore.toml".into(),
                line: 2
            }
        );
        assert_eq!(find("cpus").values, vec!["0", "1"]);
        assert_eq!(find("repair").values, vec!["true"]);
        assert_eq!(find("listen").source, Source::Default);
        assert!(settings.iter().all(|s| s.key != "config"));

        let text = render(&settings);
        assert!(text.contains("network-cores = 5"), "{text}");
        assert!(text.contains("cpus = [0, 1]"), "{text}");
        assert!(text.contains("listen = \"127.0.0.1:7411\""), "{text}");
        // What --print-config prints is itself a valid config file.
        parse(&text).unwrap();
    }
}
