//! The web console's HTTP side (issue 37, docs/console-api.md) against a real server: every
//! API call compared with what was written through the binary protocol; pages and their 404s;
//! the headers every response carries; what a hostile client sends (bad paths and
//! parameters, huge pages, URIs and headers, other methods, a foreign Host, silent and
//! surplus connections); the token off loopback (bearer, login form, cookie); one socket
//! shared with the metrics endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ContextRef, NewContext, NewTurn, Parent};
use ctxstore_server::console::{ConsoleEndpoint, ConsoleLimits, ConsoleSettings};
use serde_json::Value;

use common::{config, connect, runtime, start};

/// A response: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(known, _)| known == name)
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The typed error's code.
    fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap().to_string()
    }
}

/// `POST /login` with `token` in the form (spaces as `+`) and `headers` (each ending in
/// CRLF), on its own connection.
fn login(console: SocketAddr, token: &str, headers: &str) -> Answer {
    let body = format!("token={}", token.replace(' ', "+"));
    send(
        console,
        &format!(
            "POST /login HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\nContent-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{headers}\r\n",
            body.len()
        ),
        body.as_bytes(),
    )
}

/// One request on its own connection (`Connection: close`), raw.
fn send(addr: SocketAddr, head: &str, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    // A server that refuses a body may close before reading it.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&response)));
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: response[split + 4..].to_vec(),
    }
}

fn get_with(addr: SocketAddr, path: &str, headers: &str) -> Answer {
    send(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\r\n"),
        b"",
    )
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    get_with(addr, path, "")
}

/// A 1×1 PNG.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\xff\xff?\0\x05\xfe\x02\xfe\xa7\x35\x81\x84\0\0\0\0IEND\xaeB`\x82";

/// What the seed wrote: the ids the tests check against.
struct Seeded {
    agent: u64,
    system: u64,
    question: u64,
    image: u64,
    large: u64,
    retry: u64,
    secret: u64,
    patched: u64,
    helper: u64,
    helper_turn: u64,
    fork: u64,
}

fn seed(addr: SocketAddr) -> Seeded {
    runtime().block_on(async {
        let client = connect(addr).await;
        let open = |name: &'static str, tags: &'static [(&'static str, &'static str)]| {
            let client = client.clone();
            async move {
                let mut new = NewContext::new().name(name);
                for (key, value) in tags {
                    new = new.tag(*key, *value);
                }
                client.open_context(new).await.unwrap().context.context_id
            }
        };
        let agent = open("agent-1", &[("team", "blue")]).await;
        let helper = open("helper-1", &[("team", "red")]).await;
        open("agent-2", &[("team", "blue")]).await;
        let append = |context: &'static str, turn: NewTurn| {
            let client = client.clone();
            async move {
                client
                    .append_turn(ContextRef::Name(context.into()), None, turn)
                    .await
                    .unwrap()
                    .turn
                    .turn
                    .turn_id
            }
        };
        let json = |text: &str| NewTurn::bytes(Bytes::copy_from_slice(text.as_bytes())).codec(1);
        let system = append(
            "agent-1",
            json("{\"role\":\"system\",\"content\":\"<script>alert(1)</script>\"}")
                .key("system")
                .label("run_id", "r1"),
        )
        .await;
        let question = append(
            "agent-1",
            json("{\"role\":\"user\",\"content\":\"hi\"}")
                .label("run_id", "r1")
                .label("step", "ask"),
        )
        .await;
        let image = append("agent-1", NewTurn::bytes(Bytes::from_static(PNG))).await;
        let large = append(
            "agent-1",
            NewTurn::bytes(Bytes::from("é".repeat(200 * 1024))).codec(5),
        )
        .await;
        let retry = append(
            "agent-1",
            json("{\"role\":\"user\",\"content\":\"hello\"}")
                .parent(Parent::Turn(system))
                .label("run_id", "r1"),
        )
        .await;
        let secret = append("agent-1", json("{\"secret\":true}")).await;
        client.redact_turn(secret).await.unwrap();
        let patched = append("agent-1", json("{\"v\":1}")).await;
        client.patch_turn(patched, &b"{\"v\":2}"[..]).await.unwrap();
        let helper_turn = append("helper-1", json("{\"tool\":\"search\"}").link(retry)).await;
        let fork = client.fork(question).await.unwrap().context_id;
        Seeded {
            agent,
            system,
            question,
            image,
            large,
            retry,
            secret,
            patched,
            helper,
            helper_turn,
            fork,
        }
    })
}

fn console_config(dir: &std::path::Path) -> ctxstore_server::ServerConfig {
    let mut config = config(dir);
    config.console_listen = Some("127.0.0.1:0".parse().unwrap());
    config
}

#[test]
fn every_api_call_reads_back_what_the_protocol_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(console_config(dir.path()));
    let console = server.console_addr().expect("a console");
    let seeded = seed(server.local_addr());

    // The store.
    let store = get(console, "/api/store").json();
    let stats = server.engine().stats();
    assert_eq!(store["turns"], stats.turns);
    assert_eq!(store["contexts"], stats.contexts);
    assert_eq!(store["blobs"], stats.blobs);
    assert_eq!(store["stored_bytes"], stats.stored_bytes);
    assert_eq!(store["replication"], Value::Null);
    let samples = store["history"]["samples"].as_array().unwrap();
    assert_eq!(samples.last().unwrap()[1], stats.turns);

    // Contexts: newest update first, paged without loss or repeat, filtered.
    let listed = get(console, "/api/contexts").json();
    let ids: Vec<u64> = listed["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["context_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{listed}");
    let updated: Vec<u64> = listed["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["updated_at_unix_ms"].as_u64().unwrap())
        .collect();
    assert!(
        updated.windows(2).all(|pair| pair[0] >= pair[1]),
        "{updated:?}"
    );
    let mut paged = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = get(console, &format!("/api/contexts?limit=1{cursor}")).json();
        for context in page["contexts"].as_array().unwrap() {
            paged.push(context["context_id"].as_u64().unwrap());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(paged, ids);
    let blue = get(console, "/api/contexts?tag=team%3Dblue&name_prefix=agent-").json();
    let names: Vec<&str> = blue["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"agent-1") && names.contains(&"agent-2"));
    assert_eq!(
        get(console, "/api/contexts/@agent-1").json()["context_id"],
        seeded.agent
    );

    // The tree: every turn, the heads pointing into it (the fork's at the question).
    let tree = get(console, "/api/contexts/@agent-1/tree").json();
    let mut turns: Vec<u64> = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["turn_id"].as_u64().unwrap())
        .collect();
    turns.sort_unstable();
    let mut expected = vec![
        seeded.system,
        seeded.question,
        seeded.image,
        seeded.large,
        seeded.retry,
        seeded.secret,
        seeded.patched,
    ];
    expected.sort_unstable();
    assert_eq!(turns, expected);
    assert_eq!(tree["truncated"], false);
    let heads: Vec<(u64, u64)> = tree["heads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|head| {
            (
                head["context_id"].as_u64().unwrap(),
                head["head_turn_id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(heads.contains(&(seeded.agent, seeded.patched)), "{heads:?}");
    assert!(heads.contains(&(seeded.fork, seeded.question)), "{heads:?}");
    let retry_node = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["turn_id"] == seeded.retry)
        .unwrap();
    assert_eq!(retry_node["parent_turn_id"], seeded.system);

    // A turn: key, labels, links with their contexts, the payload as text (never as markup:
    // it is JSON data for the front-end, escaped when drawn).
    let system = get(console, &format!("/api/turns/{}", seeded.system)).json();
    assert_eq!(system["turn"]["key"], "system");
    assert_eq!(system["turn"]["labels"]["run_id"], "r1");
    assert_eq!(system["payload"]["kind"], "json");
    assert_eq!(
        system["payload"]["text"],
        "{\"role\":\"system\",\"content\":\"<script>alert(1)</script>\"}"
    );
    assert_eq!(system["context"]["name"], "agent-1");
    let helper = get(console, &format!("/api/turns/{}", seeded.helper_turn)).json();
    assert_eq!(helper["links"][0]["turn_id"], seeded.retry);
    assert_eq!(helper["links"][0]["context_id"], seeded.agent);
    assert_eq!(helper["links"][0]["context_name"], "agent-1");
    assert_eq!(helper["context"]["context_id"], seeded.helper);

    // An image; a payload over the shown limit, cut at a character; a redaction; a patch.
    let image = get(console, &format!("/api/turns/{}", seeded.image)).json();
    assert_eq!(image["payload"]["kind"], "image");
    assert_eq!(image["payload"]["media_type"], "image/png");
    let raw = get(console, &format!("/api/turns/{}/payload", seeded.image));
    assert_eq!(raw.status, 200);
    assert_eq!(raw.header("content-type"), Some("image/png"));
    assert_eq!(raw.body, PNG);
    assert!(
        raw.header("content-security-policy")
            .unwrap()
            .contains("sandbox")
    );
    let large = get(console, &format!("/api/turns/{}", seeded.large)).json();
    let shown_max = ConsoleLimits::default().payload_shown_bytes_max;
    assert_eq!(large["payload"]["bytes"], 400 * 1024);
    assert_eq!(large["payload"]["truncated"], true);
    let text = large["payload"]["text"].as_str().unwrap();
    assert_eq!(
        text.len(),
        shown_max,
        "256 KiB is an even count of 2-byte characters"
    );
    assert!(text.chars().all(|c| c == 'é'));
    assert_eq!(large["payload"]["shown_bytes"], shown_max);
    let download = get(console, &format!("/api/turns/{}/payload", seeded.large));
    assert_eq!(
        download.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(download.header("content-disposition"), Some("attachment"));
    assert_eq!(download.body.len(), 400 * 1024);
    let secret = get(console, &format!("/api/turns/{}", seeded.secret)).json();
    assert_eq!(secret["overlay"]["redacted"], true);
    assert_eq!(secret["payload"]["kind"], "empty");
    let patched = get(console, &format!("/api/turns/{}", seeded.patched)).json();
    assert_eq!(patched["overlay"]["patched"], true);
    assert_eq!(patched["payload"]["text"], "{\"v\":2}");
    let original = get(console, &format!("/api/turns/{}?as_of=0", seeded.patched)).json();
    assert_eq!(original["payload"]["text"], "{\"v\":1}");

    // The store-wide find: newest first; a second label filters.
    let found = get(console, "/api/find?label=run_id%3Dr1").json();
    let found_ids: Vec<u64> = found["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| turn["turn_id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        found_ids,
        vec![seeded.retry, seeded.question, seeded.system]
    );
    let paged = get(console, "/api/find?label=run_id%3Dr1&limit=2").json();
    assert_eq!(paged["turns"].as_array().unwrap().len(), 2);
    let next = paged["next_before"].as_u64().unwrap();
    let rest = get(
        console,
        &format!("/api/find?label=run_id%3Dr1&before={next}"),
    )
    .json();
    assert_eq!(rest["turns"][0]["turn_id"], seeded.system);
    assert_eq!(rest["next_before"], Value::Null);
    let both = get(console, "/api/find?label=step%3Dask&label=run_id%3Dr1").json();
    assert_eq!(both["turns"].as_array().unwrap().len(), 1);
    assert_eq!(both["turns"][0]["turn_id"], seeded.question);
}

#[test]
fn pages_404s_and_the_headers_of_every_response() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(console_config(dir.path()));
    let console = server.console_addr().unwrap();
    let seeded = seed(server.local_addr());
    for (path, status) in [
        ("/", 200),
        ("/store", 200),
        ("/find?label=run_id%3Dr1", 200),
        (&*format!("/contexts/{}", seeded.agent), 200),
        ("/contexts/@agent-1", 200),
        (&*format!("/turns/{}", seeded.system), 200),
        (
            &*format!("/compare/{}/{}", seeded.system, seeded.retry),
            200,
        ),
        ("/contexts/999", 404),
        ("/contexts/@nobody", 404),
        ("/contexts/%FF", 404),
        ("/turns/999999", 404),
        ("/turns/nope", 404),
        ("/nothing/here", 404),
        ("/assets/../../../etc/passwd", 404),
    ] {
        let answer = get(console, path);
        assert_eq!(answer.status, status, "{path}: {}", answer.text());
        assert_eq!(
            answer.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
        assert!(
            answer.text().contains("/assets/index.js"),
            "{path}: the app's page"
        );
    }
    let script = get(console, "/assets/index.js");
    assert_eq!(script.status, 200);
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    for path in [
        "/",
        "/api/store",
        "/assets/index.css",
        "/api/nothing",
        "/login",
    ] {
        let answer = get(console, path);
        let policy = answer.header("content-security-policy").unwrap();
        assert!(policy.contains("script-src 'self'"), "{path}: {policy}");
        assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"));
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{path}");
    }
    // Without a token there is no login: the form sends the browser to the console.
    assert_eq!(get(console, "/login").status, 303);
}

#[test]
fn hostile_requests_get_typed_errors_and_the_console_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(console_config(dir.path()));
    let console = server.console_addr().unwrap();
    seed(server.local_addr());
    for (path, status, code) in [
        ("/api/turns/abc", 400, "INVALID_ARGUMENT"),
        ("/api/turns/0", 400, "INVALID_ARGUMENT"),
        ("/api/turns/18446744073709551616", 400, "INVALID_ARGUMENT"),
        ("/api/turns/999999", 404, "NOT_FOUND"),
        ("/api/turns/999999/payload", 404, "NOT_FOUND"),
        ("/api/contexts/%FF%FE", 400, "INVALID_ARGUMENT"),
        ("/api/contexts/-1", 400, "INVALID_ARGUMENT"),
        ("/api/contexts/@nobody/tree", 404, "NOT_FOUND"),
        ("/api/nothing", 404, "NOT_FOUND"),
        ("/api/contexts/1/tree/more", 404, "NOT_FOUND"),
        ("/api/contexts?limit=100000", 400, "TOO_LARGE"),
        ("/api/contexts?limit=0", 400, "INVALID_ARGUMENT"),
        ("/api/contexts?limit=-5", 400, "INVALID_ARGUMENT"),
        ("/api/contexts?cursor=garbage", 400, "INVALID_ARGUMENT"),
        ("/api/contexts?tag=nokey", 400, "INVALID_ARGUMENT"),
        ("/api/contexts?colour=red", 400, "INVALID_ARGUMENT"),
        ("/api/find?label=run_id%3Dr1&limit=5000", 400, "TOO_LARGE"),
        ("/api/find", 400, "INVALID_ARGUMENT"),
        ("/api/find?label=colour%3Dred", 400, "INVALID_ARGUMENT"),
        ("/api/turns/1?as_of=x", 400, "INVALID_ARGUMENT"),
        (
            &*format!("/api/contexts/@{}", "n".repeat(300)),
            400,
            "TOO_LARGE",
        ),
    ] {
        let answer = get(console, path);
        assert_eq!(answer.status, status, "{path}: {}", answer.text());
        assert_eq!(answer.code(), code, "{path}");
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!message.is_empty(), "{path}");
    }
    // A URI, a header and a body too large; other methods; a foreign Host (DNS rebinding).
    let long = get(
        console,
        &format!("/api/contexts?name_prefix={}", "a".repeat(5000)),
    );
    assert_eq!(long.status, 414);
    let huge_header = get_with(
        console,
        "/api/store",
        &format!("X-Junk: {}\r\n", "j".repeat(64 * 1024)),
    );
    assert_eq!(huge_header.status, 431);
    let post = send(
        console,
        &format!(
            "POST /api/store HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"
        ),
        b"{}",
    );
    assert_eq!(post.status, 405);
    let delete = send(
        console,
        &format!("DELETE /contexts/1 HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\n\r\n"),
        b"",
    );
    assert_eq!(delete.status, 405);
    let rebound = send(
        console,
        "GET /api/store HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(rebound.status, 403);
    assert_eq!(rebound.code(), "FORBIDDEN");
    // Garbage instead of HTTP: closed (a 400 at most), and the console answers the next.
    let mut garbage = TcpStream::connect(console).unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    garbage.write_all(&[0xff; 4096]).unwrap();
    let mut reply = Vec::new();
    let _ = garbage.read_to_end(&mut reply);
    assert!(
        reply.is_empty() || reply.starts_with(b"HTTP/1.1 400"),
        "{reply:?}"
    );
    assert_eq!(get(console, "/api/store").status, 200);
}

/// The limits on connections, straight on a `ConsoleEndpoint` with small ones: surplus
/// connections are closed at once, a silent one after the head timeout, and the console
/// answers throughout.
#[test]
fn silent_and_surplus_connections_cannot_hold_the_console() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine_config = ctxstore_engine::EngineConfig::new(dir.path().join("data"));
    engine_config.limits.log_preallocate_bytes = 64 * 1024;
    let engine = ctxstore_engine::Engine::open(engine_config).unwrap();
    // Outside the ephemeral range, so that the refused connect after stop cannot meet another
    // test's listener handed the freed port.
    let listen = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    let mut settings = ConsoleSettings::new(listen.parse().unwrap(), engine.clone());
    settings.limits.connections_max = 3;
    settings.limits.request_head_timeout = Duration::from_millis(500);
    let endpoint = ConsoleEndpoint::start(settings).unwrap();
    let addr = endpoint.local_addr();
    // Two silent connections take two slots; they are closed after the head timeout.
    let silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(get(addr, "/api/store").status, 200, "the third slot serves");
    // A surplus connection, while two silent ones and one held one fill the slots: closed.
    let held = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut surplus = TcpStream::connect(addr).unwrap();
    surplus
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ =
        surplus.write_all(format!("GET /api/store HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes());
    let mut reply = Vec::new();
    let _ = surplus.read_to_end(&mut reply);
    assert!(
        reply.is_empty(),
        "a connection over the limit is closed unanswered"
    );
    for mut stream in silent.into_iter().chain([held]) {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let started = Instant::now();
        let mut buffer = Vec::new();
        let _ = stream.read_to_end(&mut buffer);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "closed by the head timeout"
        );
    }
    assert_eq!(get(addr, "/api/store").status, 200);
    endpoint.stop();
    let refused = TcpStream::connect(addr)
        .map(|_| ())
        .expect_err("connected after stop");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    engine.shutdown();
}

#[test]
fn off_loopback_the_console_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut refused = console_config(dir.path());
    refused.console_listen = Some("0.0.0.0:0".parse().unwrap());
    let error = ctxstore_server::Server::start(refused).unwrap_err();
    assert!(format!("{error:#}").contains("--token-file"), "{error:#}");

    let mut config = console_config(dir.path());
    config.console_listen = Some("0.0.0.0:0".parse().unwrap());
    config.token = Some("s3cret token".into());
    let server = start(config);
    let port = server.console_addr().unwrap().port();
    let console: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let missing = get(console, "/api/store");
    assert_eq!(missing.status, 401);
    assert_eq!(missing.code(), "UNAUTHORIZED");
    let page = get(console, "/contexts/1");
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), Some("/login"));
    assert_eq!(
        get_with(console, "/api/store", "Authorization: Bearer wrong\r\n").status,
        401
    );
    assert_eq!(
        get_with(
            console,
            "/api/store",
            "Authorization: Bearer s3cret token\r\n"
        )
        .status,
        200
    );
    // The code and styles need no token (the login page uses them); data does.
    assert_eq!(get(console, "/assets/index.js").status, 200);
    let form = get(console, "/login");
    assert_eq!(form.status, 200);
    assert!(
        form.text()
            .contains("<form method=\"post\" action=\"/login\">")
    );

    let login = |token: &str| login(console, token, "");
    let wrong = login("guess");
    assert_eq!(wrong.status, 401);
    assert!(wrong.text().contains("not the server's token"));
    assert!(wrong.header("set-cookie").is_none());
    let right = login("s3cret token");
    assert_eq!(right.status, 303);
    let cookie = right.header("set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("s3cret"), "the cookie is not the token");
    let session = cookie.split(';').next().unwrap();
    let store = get_with(console, "/api/store", &format!("Cookie: {session}\r\n"));
    assert_eq!(store.status, 200);
    assert_eq!(
        get_with(console, "/", &format!("Cookie: {session}\r\n")).status,
        200
    );
    let logout = send(
        console,
        &format!(
            "POST /logout HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        ),
        b"",
    );
    assert_eq!(logout.status, 303);
    assert!(logout.header("set-cookie").unwrap().contains("Max-Age=0"));
    // A body declared over the limit is refused before any of it is read.
    let flood = send(
        console,
        &format!(
            "POST /login HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n"
        ),
        b"",
    );
    assert_eq!(flood.status, 413);
}

#[test]
fn one_socket_for_the_console_and_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = console_config(dir.path());
    config.metrics_listen = config.console_listen;
    let server = start(config);
    let console = server.console_addr().unwrap();
    assert_eq!(server.metrics_addr(), Some(console));
    let metrics = get(console, "/metrics");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.text().contains("ctxstore_turns "),
        "{}",
        metrics.text()
    );
    assert_eq!(get(console, "/api/store").status, 200);
    assert_eq!(get(console, "/").status, 200);
}

/// Issue 44 item 14: wrong tokens are limited per address. Of 50 wrong tokens in a row, the
/// first five are answered 401 and nearly all the rest 429 with `Retry-After`, at once and
/// unchecked; the right token waits its turn too, then logs in. Wrong bearers count the same.
/// The session cookie is `Secure` when a proxy says the browser came over HTTPS.
#[test]
fn wrong_tokens_are_rate_limited_and_the_cookie_is_secure_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = console_config(dir.path());
    config.token = Some("s3cret token".into());
    let server = start(config);
    let console = server.console_addr().unwrap();
    let free = ConsoleLimits::default().login_failures_free_max as usize;

    let login = |token: &str, headers: &str| login(console, token, headers);
    let statuses: Vec<u16> = (0..50)
        .map(|guess| {
            let answer = login(&format!("guess {guess}"), "");
            assert!(answer.header("set-cookie").is_none());
            if answer.status == 429 {
                let seconds: u64 = answer.header("retry-after").unwrap().parse().unwrap();
                assert!((1..=300).contains(&seconds), "Retry-After: {seconds}");
                assert!(answer.text().contains("Too many wrong tokens"));
            }
            answer.status
        })
        .collect();
    assert_eq!(statuses[..free], vec![401; free], "{statuses:?}");
    assert_eq!(statuses[free], 429, "{statuses:?}");
    // Each 401 past the free ones doubles the wait (1 s, 2 s, 4 s): a few at most, however
    // slow the machine.
    let answered = statuses.iter().filter(|status| **status == 401).count();
    assert!(
        answered <= free + 3,
        "{answered} wrong tokens checked: {statuses:?}"
    );
    assert!(statuses.iter().all(|status| [401, 429].contains(status)));

    // The right token while the address waits: not checked either.
    let early = login("s3cret token", "");
    assert_eq!(early.status, 429);
    assert!(early.header("set-cookie").is_none());
    let wait: u64 = early.header("retry-after").unwrap().parse().unwrap();
    std::thread::sleep(Duration::from_secs(wait));
    let right = login("s3cret token", "");
    assert_eq!(right.status, 303, "{}", right.text());
    let cookie = right.header("set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let session = cookie.split(';').next().unwrap();
    let store = get_with(console, "/api/store", &format!("Cookie: {session}\r\n"));
    assert_eq!(store.status, 200);

    // The right token cleared the count; wrong bearers count like wrong logins.
    let bearer = |token: &str| {
        get_with(
            console,
            "/api/store",
            &format!("Authorization: Bearer {token}\r\n"),
        )
    };
    for _ in 0..free {
        assert_eq!(bearer("guess").status, 401);
    }
    let limited = bearer("s3cret token");
    assert_eq!(limited.status, 429);
    assert_eq!(limited.code(), "RATE_LIMITED");
    assert!(limited.header("retry-after").is_some());
    // A session opens the console meanwhile: it is not a guess.
    let store = get_with(console, "/api/store", &format!("Cookie: {session}\r\n"));
    assert_eq!(store.status, 200);
    let wait: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    std::thread::sleep(Duration::from_secs(wait));

    // Through a proxy that says the browser came over HTTPS: a Secure cookie, cleared the
    // same way.
    for proxy in [
        "X-Forwarded-Proto: https\r\n",
        "Forwarded: for=192.0.2.7;proto=https\r\n",
    ] {
        let right = login("s3cret token", proxy);
        assert_eq!(right.status, 303, "{}", right.text());
        let cookie = right.header("set-cookie").unwrap();
        assert!(
            cookie.contains("; Secure") && cookie.contains("HttpOnly"),
            "{cookie}"
        );
    }
    let logout = send(
        console,
        &format!(
            "POST /logout HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\nX-Forwarded-Proto: \
             https\r\nContent-Length: 0\r\n\r\n"
        ),
        b"",
    );
    let cleared = logout.header("set-cookie").unwrap();
    assert!(
        cleared.contains("Max-Age=0") && cleared.contains("; Secure"),
        "{cleared}"
    );
}

/// Decision 0031, step 8: a primary's `replication` carries ROLE's figures — its role and
/// epoch, the lease (holder, length, age), the acknowledgement gate, failovers and the remote
/// acknowledgements — as ROLE answers them, next to the shipper's state and lag. The binary,
/// `--replicate-to file://…` with a lease and `--ack-after remote`, the console and the
/// metrics on one socket (where the console finds the remote acknowledgements' figures).
#[test]
fn a_primary_shows_its_role_lease_failovers_and_remote_acks() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    let console: std::net::SocketAddr = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port())
        .parse()
        .unwrap();
    let console_text = console.to_string();
    let server = common::spawn_binary(
        &root.path().join("data"),
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "50ms",
            "--replica-lease",
            "4s",
            "--ack-after",
            "remote",
            "--console-listen",
            &console_text,
            "--metrics-listen",
            &console_text,
        ],
    );
    let client = common::blocking_client(&server);
    let context = client.create_context().unwrap().context_id;
    for i in 0..5u32 {
        client
            .append(context, None, 0, 0, Bytes::from(format!("remote {i}")))
            .unwrap();
    }
    let role = client.role().unwrap();
    let started = Instant::now();
    while TcpStream::connect(console).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let store = get(console, "/api/store").json();
    let replication = &store["replication"];
    assert_eq!(replication["state"], "shipping", "{replication}");
    assert!(replication["lag_ms"].is_u64(), "{replication}");
    assert_eq!(replication["role"], "primary", "{replication}");
    assert_eq!(replication["accepts_writes"], true, "{replication}");
    assert_eq!(replication["epoch"], role.epoch, "{replication}");
    assert!(role.epoch >= 1, "{role:?}");
    assert_eq!(
        replication["lease_holder"],
        role.holder.as_str(),
        "{replication}"
    );
    assert!(!role.holder.is_empty(), "{role:?}");
    assert_eq!(replication["lease_ms"], 4000, "{replication}");
    let age = replication["lease_age_ms"].as_u64().unwrap();
    assert!(age < 4000, "a renewed lease: {replication}");
    assert!(replication["ack_open_ms"].is_u64(), "{replication}");
    assert_eq!(replication["failovers"], 0, "{replication}");
    assert_eq!(replication["last_failover_ms"], 0, "{replication}");
    let acks = &replication["remote_acks"];
    assert_eq!(acks["total"], 5, "the five appends: {replication}");
    assert_eq!(acks["total"], role.remote_acks_total, "{replication}");
    assert_eq!(acks["waiting"], 0, "{replication}");
    assert_eq!(acks["unconfirmed"], 0, "{replication}");
    let p50 = acks["p50_us"].as_u64().unwrap();
    assert!(
        p50 > 0 && acks["p99_us"].as_u64().unwrap() >= p50,
        "{replication}"
    );
}

/// A tenant's token opens the console on its own data (decision 0032 §2): its contexts,
/// turns, payloads and finds, another tenant's ids answering as absent ones; the store's
/// figures stay the operator's and `/api/tenants` lists the tenant alone. Its session closes
/// when the tenants file drops its token, and when the tenant is deleted; a token without
/// the `read` right, or a cookie of one tenant's name with another's MAC, opens nothing.
#[test]
fn a_tenants_console_shows_its_own_data_only() {
    const OPERATOR: &str = "operator-token-0123456789";
    const ACME: &str = "acme-token-0123456789abcdef";
    const GLOBEX: &str = "globex-token-0123456789abcd";
    const WRITER: &str = "writer-token-0123456789abcd";
    let dir = tempfile::tempdir().unwrap();
    let tenants_file = dir.path().join("tenants.toml");
    let tenants = |acme_tokens: &str| {
        format!(
            "[[tenant]]\nname = \"acme\"\ntokens = [{acme_tokens}]\nrights = [\"read\", \
             \"write\"]\nquota_contexts = 10\n\n[[tenant]]\nname = \"globex\"\ntokens = \
             [\"{GLOBEX}\"]\nrights = [\"read\", \"write\"]\n\n[[tenant]]\nname = \
             \"writer\"\ntokens = [\"{WRITER}\"]\nrights = [\"write\"]\n"
        )
    };
    std::fs::write(&tenants_file, tenants(&format!("\"{ACME}\""))).unwrap();
    let mut config = console_config(dir.path().join("store").as_path());
    config.token = Some(OPERATOR.into());
    config.tenants_file = Some(tenants_file.clone());
    let server = start(config);
    let console = server.console_addr().expect("a console");

    // Each tenant writes a context named `main` with a labelled turn.
    let write = |token: &str, text: &'static str| {
        runtime().block_on(async {
            let mut client_config =
                ctxstore_client::ClientConfig::new(server.local_addr().to_string());
            client_config.token = Some(token.into());
            let client = ctxstore_client::Client::connect(client_config)
                .await
                .unwrap();
            let context = client
                .open_context(NewContext::new().name("main"))
                .await
                .unwrap()
                .context
                .context_id;
            let turn = NewTurn::bytes(Bytes::from_static(text.as_bytes()))
                .codec(1)
                .label("run_id", "r1");
            let turn = client
                .append_turn(ContextRef::Id(context), None, turn)
                .await
                .unwrap()
                .turn
                .turn
                .turn_id;
            (context, turn)
        })
    };
    let (acme_context, acme_turn) = write(ACME, "{\"content\":\"acme's own\"}");
    let (globex_context, globex_turn) = write(GLOBEX, "{\"content\":\"globex's secret\"}");

    let login = |token: &str| login(console, token, "");
    let signed_in = login(ACME);
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    let cookie = signed_in.header("set-cookie").unwrap();
    let session = cookie.split(';').next().unwrap().to_string();
    assert!(session.starts_with("ctxstore_console=acme."), "{session}");
    assert!(!session.contains(ACME), "the cookie is not the token");
    let as_acme = |path: &str| get_with(console, path, &format!("Cookie: {session}\r\n"));

    let me = as_acme("/api/me").json();
    assert_eq!(me["viewer"], "tenant");
    assert_eq!(me["tenant"], "acme");
    let listed = as_acme("/api/contexts").json();
    let ids: Vec<u64> = listed["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["context_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [acme_context]);
    assert_eq!(
        as_acme("/api/contexts/@main").json()["context_id"],
        acme_context
    );
    let turn = as_acme(&format!("/api/turns/{acme_turn}")).json();
    assert_eq!(turn["payload"]["text"], "{\"content\":\"acme's own\"}");
    let found = as_acme("/api/find?label=run_id=r1").json();
    assert_eq!(found["turns"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["turns"][0]["turn_id"], acme_turn);
    // Globex's ids answer as absent ones do, pages included.
    for path in [
        format!("/api/contexts/{globex_context}"),
        format!("/api/contexts/{globex_context}/tree"),
        format!("/api/turns/{globex_turn}"),
        format!("/api/turns/{globex_turn}/payload"),
        format!("/contexts/{globex_context}"),
        format!("/turns/{globex_turn}"),
    ] {
        let absent = path
            .replace(&globex_context.to_string(), "999999")
            .replace(&globex_turn.to_string(), "999998");
        let (mine, none) = (as_acme(&path), as_acme(&absent));
        assert_eq!((mine.status, none.status), (404, 404), "{path}");
        assert!(!mine.text().contains("globex"), "{path}: {}", mine.text());
    }
    // The store's figures are the operator's; the tenant's usage is its own entry.
    let store = as_acme("/api/store");
    assert_eq!((store.status, store.code().as_str()), (403, "FORBIDDEN"));
    let own = as_acme("/api/tenants").json();
    let own = own["tenants"].as_array().unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(
        (&own[0]["name"], &own[0]["contexts"]),
        (&"acme".into(), &1.into())
    );
    assert_eq!(own[0]["quota_contexts"], 10);
    assert_eq!(own[0]["quota_bytes"], Value::Null);
    let bearer = |token: &str, path: &str| {
        get_with(console, path, &format!("Authorization: Bearer {token}\r\n"))
    };
    let everyone = bearer(OPERATOR, "/api/tenants").json();
    let names: Vec<&str> = everyone["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tenant| tenant["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["acme", "globex", "writer"]);
    assert_eq!(bearer(OPERATOR, "/api/me").json()["viewer"], "operator");
    assert_eq!(
        bearer(OPERATOR, "/api/contexts").json()["contexts"],
        serde_json::json!([])
    );
    // A tenant's bearer token reads as its session does.
    let globex_sees = bearer(GLOBEX, "/api/contexts").json();
    assert_eq!(globex_sees["contexts"][0]["context_id"], globex_context);
    assert_eq!(
        bearer(GLOBEX, &format!("/api/turns/{acme_turn}")).status,
        404
    );

    // What opens nothing: a token without the read right, another tenant's name on acme's
    // MAC, a MAC of nothing.
    let refused = login(WRITER);
    assert_eq!(refused.status, 401);
    assert!(refused.text().contains("read right"), "{}", refused.text());
    assert_eq!(bearer(WRITER, "/api/contexts").status, 401);
    let forged = session.replace("=acme.", "=globex.");
    assert_eq!(
        get_with(console, "/api/contexts", &format!("Cookie: {forged}\r\n")).status,
        401
    );
    let bare = get_with(
        console,
        "/api/contexts",
        "Cookie: ctxstore_console=acme.\r\n",
    );
    assert_eq!(bare.status, 401);

    // The tenants file drops acme's token: its session closes on the reload.
    std::fs::write(&tenants_file, tenants("\"another-token-0123456789ab\"")).unwrap();
    server.reload_tenants();
    assert_eq!(as_acme("/api/contexts").status, 401);
    std::fs::write(&tenants_file, tenants(&format!("\"{ACME}\""))).unwrap();
    server.reload_tenants();
    assert_eq!(as_acme("/api/contexts").status, 200);
    // Deleted: its session and its token open nothing.
    runtime().block_on(async {
        let mut client_config = ctxstore_client::ClientConfig::new(server.local_addr().to_string());
        client_config.token = Some(OPERATOR.into());
        let operator = ctxstore_client::Client::connect(client_config)
            .await
            .unwrap();
        operator.delete_tenant("acme").await.unwrap();
    });
    assert_eq!(as_acme("/api/contexts").status, 401);
    assert_eq!(login(ACME).status, 401);
    assert_eq!(bearer(GLOBEX, "/api/contexts").status, 200);
}
