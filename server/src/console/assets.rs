//! The console's front-end, built from `console/` (`npm run build`) into `console/dist/`,
//! which is committed and embedded here (decision 0025): `cargo build` needs no Node, and
//! one binary serves everything. CI rebuilds `console/dist/` and fails if it changed; the
//! test below fails if a built file is missing from this table.

/// One embedded file, served at `path`.
#[derive(Debug)]
pub struct Asset {
    pub path: &'static str,
    pub media_type: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! dist {
    ($file:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../console/dist/",
            $file
        ))
    };
}

/// The app's page, served for every page path (the front-end routes on the path).
pub const INDEX_HTML: &[u8] = dist!("index.html");
/// The login form (no script); `auth` fills in its message.
pub const LOGIN_HTML: &[u8] = dist!("login.html");

/// The files served as they are, to anyone who reaches the console (code and styles, no
/// data: the login page needs its style before a token is given).
pub const ASSETS: [Asset; 4] = [
    Asset {
        path: "/assets/index.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: dist!("assets/index.js"),
    },
    Asset {
        path: "/assets/index.css",
        media_type: "text/css; charset=utf-8",
        bytes: dist!("assets/index.css"),
    },
    Asset {
        path: "/assets/login.css",
        media_type: "text/css; charset=utf-8",
        bytes: dist!("assets/login.css"),
    },
    Asset {
        path: "/favicon.svg",
        media_type: "image/svg+xml",
        bytes: dist!("favicon.svg"),
    },
];

/// The asset served at `path`, if any.
pub fn public(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every file the build wrote is served (a new chunk or asset needs a row above), and
    /// every row is a file of the build.
    #[test]
    fn every_built_file_is_embedded() {
        let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../console/dist");
        let mut built = Vec::new();
        let mut stack = vec![dist.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let relative = path.strip_prefix(&dist).unwrap();
                    built.push(format!("/{}", relative.to_string_lossy()));
                }
            }
        }
        built.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|asset| asset.path.to_string()).collect();
        served.extend(["/index.html".to_string(), "/login.html".to_string()]);
        served.sort();
        assert_eq!(built, served, "console/dist and the embedded table differ");
        assert!(
            !INDEX_HTML.windows(8).any(|window| window == b"<script>"),
            "no inline script"
        );
        assert!(
            LOGIN_HTML
                .windows(14)
                .any(|window| window == b"<!--message-->"),
            "the login page keeps its message mark"
        );
    }
}
