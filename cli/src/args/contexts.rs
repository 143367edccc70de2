//! `ctx …`: the context commands as clap parses them, with the parsers of their values
//! (time bounds, time to live).

use std::time::Duration;

use clap::Subcommand;
use ctxstore_client::ContextRef;

use super::{parse_context, parse_tag};

#[derive(Subcommand, Debug)]
pub(crate) enum CtxCommand {
    /// A new context: empty, or with its head at --from TURN; optionally named and tagged.
    /// Prints context_id, head_turn_id, head_depth, name, tags, created_at_unix_ms,
    /// updated_at_unix_ms and created (false when --get-or-create found the name taken).
    Create {
        /// Turn id: the new context's head (omit for an empty context).
        #[arg(long)]
        from: Option<u64>,
        /// A unique name (1..=256 bytes of UTF-8); the context is then also @NAME. A taken
        /// name exits 7 (ALREADY_EXISTS) unless --get-or-create.
        #[arg(long)]
        name: Option<String>,
        /// A tag KEY=VALUE (repeat for more; at most 32, keys 1..=64 bytes, values 1..=1024 bytes).
        #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
        tags: Vec<(String, String)>,
        /// With a taken --name: print that context (created: false) instead of failing;
        /// --from and --tag are then not applied.
        #[arg(long, requires = "name")]
        get_or_create: bool,
    },
    /// A new context whose head is TURN (copies nothing).
    Fork {
        /// Turn id: the new context's head.
        turn: u64,
    },
    /// A context's head, name, tags and times, its floor_depth (turns below it were pruned;
    /// 0: none) and ttl_ms (its own time to live; null: none).
    Show {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// Set and remove tags atomically; prints the context as `ctx show` does (without
    /// floor_depth and ttl_ms).
    Tag {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Tags to set, KEY=VALUE (keys 1..=64 bytes, values 1..=1024 bytes, ≤ 32 per context).
        #[arg(value_name = "KEY=VALUE", value_parser = parse_tag)]
        set: Vec<(String, String)>,
        /// A tag key to remove (repeat for more; a key that is not there is no error).
        #[arg(long = "remove", value_name = "KEY")]
        remove: Vec<String>,
        /// Change the tags only if the context's head is still this turn (0: only if empty);
        /// exits 4 (CONFLICT) otherwise, with the actual head in `detail`.
        #[arg(long)]
        expect_head: Option<u64>,
    },
    /// Give a context that has none a name.
    Name {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The name (1..=256 bytes of UTF-8); a taken name exits 7 (ALREADY_EXISTS).
        name: String,
    },
    /// Every context matching all the filters, one per line (the `ctx show` fields but
    /// floor_depth and ttl_ms), in ContextID order (in name order with --name-prefix).
    /// Follows the server's pages.
    List {
        /// Only contexts with this tag, KEY=VALUE (repeat: all of them).
        #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
        tags: Vec<(String, String)>,
        /// Only contexts whose name starts with this.
        #[arg(long)]
        name_prefix: Option<String>,
        /// Only contexts last updated before this time (exclusive): Unix milliseconds, a
        /// time like 2026-11-27T10:00:00Z, or an age like 7d (that long ago).
        #[arg(long, value_name = "TIME", value_parser = parse_time_bound)]
        updated_before: Option<u64>,
        /// Only contexts last updated after this time (exclusive): Unix milliseconds (0: any),
        /// a time like 2026-11-27T10:00:00Z, or an age like 7d, 12h (that long ago).
        #[arg(long, value_name = "TIME", value_parser = parse_time_bound)]
        updated_after: Option<u64>,
        /// Print at most this many (default: every match).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// A copy of CTX named NEW: the same head, tags and key-value entries, sharing every turn
    /// and payload (nothing is copied). Prints the new context as `ctx show` does (without
    /// floor_depth and ttl_ms).
    Clone {
        /// The context to copy: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The copy's name (1..=256 bytes of UTF-8); a taken name exits 7 (ALREADY_EXISTS).
        #[arg(long)]
        name: String,
    },
    /// Delete a context: every command naming it exits 3 (NOT_FOUND) from then on.
    ///
    /// Its name is free again; its ContextID is never reused. Its turns stay readable through
    /// the contexts that share them (forks, clones). Prints context_id, name and deleted
    /// (true).
    Delete {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// Keep only the newest N depths of a context's chain readable through it.
    ///
    /// The floor becomes head depth + 1 − N (it never moves down): `last`, `page`, `range`,
    /// `log`, `window` and `turn CTX --key` stop at it, on every branch; an append after a
    /// turn below it is refused. Turns below the floor stay readable through other contexts
    /// that share them. Prints the context as `ctx show` does, with the new floor_depth.
    Prune {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// How many depths to keep, counting the head (at least 1; 0 is refused by the
        /// server: use `ctx delete`).
        #[arg(long, value_name = "N", required = true)]
        keep: u32,
    },
    /// Give a context a time to live, or clear it: the server deletes a context that has
    /// not been updated (head move, tag or key-value change) for that long.
    ///
    /// Prints the context as `ctx show` does, with ttl_ms (null when cleared). A context
    /// without its own time to live may still expire under the server's --context-ttl.
    Ttl {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// A duration like 7d, 12h, 30m, 1h30m (at least 1ms, at most 100 years), or `none`
        /// to clear it.
        #[arg(value_name = "DURATION|none", value_parser = parse_ttl)]
        ttl: Ttl,
    },
}

/// A time bound of `ctx list` as Unix milliseconds: plain milliseconds, an RFC 3339 time, or
/// an age (`7d`, `1h30m`) counted back from now.
pub(crate) fn parse_time_bound(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("{text:?} is too large for Unix milliseconds"));
    }
    let now = std::time::SystemTime::now();
    let time = if let Ok(age) = humantime::parse_duration(text) {
        now.checked_sub(age)
            .ok_or_else(|| format!("{text:?} reaches back before 1970"))?
    } else if let Ok(time) = humantime::parse_rfc3339_weak(text) {
        time
    } else {
        return Err(format!(
            "{text:?} is neither Unix milliseconds, a time like 2026-11-27T10:00:00Z, nor an \
             age like 7d or 12h"
        ));
    };
    time.duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .map_err(|_| format!("{text:?} is before 1970"))
}

/// `ctx ttl`'s argument: a time to live, or `none` to clear it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ttl {
    Set(Duration),
    Clear,
}

/// A time to live: `none`, or a duration of at least 1 ms (0 would read as "expire at once"
/// but clears it on the wire: `none` says that).
pub(crate) fn parse_ttl(text: &str) -> Result<Ttl, String> {
    let text = text.trim();
    if text == "none" {
        return Ok(Ttl::Clear);
    }
    let ttl = humantime::parse_duration(text).map_err(|error| {
        format!("{text:?} is not a duration like 7d, 12h, 30m, or none: {error}")
    })?;
    match u64::try_from(ttl.as_millis()) {
        Ok(0) => Err(format!(
            "a time to live of {text:?} is under 1ms; to clear it, write none"
        )),
        Ok(_) => Ok(Ttl::Set(ttl)),
        Err(_) => Err(format!(
            "a time to live of {text:?} is too long (the server takes at most 100 years)"
        )),
    }
}
