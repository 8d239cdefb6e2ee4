//! Configuration and command line:
//!
//! - `config/default.toml` parses to exactly the built-in defaults, sets every setting, and
//!   documents every key with a comment line directly above it.
//! - The binary serves on the address of the file given with `--config`; `MCP_WS_LISTEN`
//!   overrides the file, and `--listen` overrides `MCP_WS_LISTEN`.
//! - An invalid configuration (unknown key, zero limit, unreadable file, bad address) makes
//!   the binary exit with code 2 and a message on stderr naming the problem; with code 2
//!   too when stderr cannot be written.
//! - `GET /healthz` answers 200 with the body `ok`; `GET /` a short text page naming both
//!   URLs of the endpoint (nothing about the version).
//! - `--help` lists every flag with its environment variable; the start-up log names the
//!   config file, the builtin set and both URLs of the endpoint.

use crate::support::http::{http_get, http_get_with};
use crate::support::process::{limit_open_files, open_files_limits, ServerProcess};
use crate::support::{settings, start};

use mcp_ws::Settings;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

const DEFAULT_TOML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml");

fn default_toml_text() -> String {
    std::fs::read_to_string(DEFAULT_TOML).expect("config/default.toml is readable")
}

#[test]
fn default_toml_equals_the_builtin_defaults() {
    let from_file = Settings::from_file(Path::new(DEFAULT_TOML)).expect("default.toml is valid");
    assert_eq!(from_file, Settings::default());
}

#[test]
fn every_key_in_default_toml_has_a_comment_line_above_it() {
    let text = default_toml_text();
    let lines: Vec<&str> = text.lines().collect();
    let mut keys = 0;
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        assert!(line.contains('='), "line {}: not a key: {line:?}", i + 1);
        keys += 1;
        let above = if i == 0 { "" } else { lines[i - 1].trim() };
        assert!(
            above.starts_with('#'),
            "line {}: `{line}` has no comment line directly above it",
            i + 1
        );
    }
    assert!(keys >= 17, "found only {keys} keys");
}

/// The field names serde expects in a table, read from its unknown-field error (the
/// settings types deny unknown fields and derive no Serialize to list them otherwise).
fn expected_fields(section: Option<&str>) -> Vec<String> {
    let toml = match section {
        Some(section) => format!("[{section}]\nno_such_setting = 1\n"),
        None => "no_such_setting = 1\n".to_owned(),
    };
    let error = toml::from_str::<Settings>(&toml)
        .expect_err("unknown fields are rejected")
        .to_string();
    let (_, expected) = error
        .split_once("expected")
        .unwrap_or_else(|| panic!("error lists the expected fields: {error}"));
    let fields: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!fields.is_empty(), "no fields in: {error}");
    fields
}

/// The settings a section of default.toml shows as a commented-out example (`# key = …`):
/// those whose default is "unset", which TOML cannot spell.
fn commented_examples(text: &str, section: &str) -> Vec<String> {
    let header = format!("[{section}]");
    text.lines()
        .skip_while(|line| line.trim() != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.strip_prefix("# ")?.split_once(" = "))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn default_toml_sets_every_setting() {
    let text = default_toml_text();
    let table: toml::Table = text.parse().expect("valid TOML");
    for section in expected_fields(None) {
        // A list of tables none of which is set by default (`[[upstreams]]`): shown as a
        // commented-out example with every key.
        let list_header = format!("# [[{section}]]");
        if !table.contains_key(&section) && text.contains(&list_header) {
            let example: Vec<String> = text
                .lines()
                .skip_while(|line| line.trim() != list_header)
                .skip(1)
                .take_while(|line| line.starts_with("# "))
                .filter_map(|line| line.strip_prefix("# ")?.split_once(" = "))
                .map(|(key, _)| key.trim().to_owned())
                .collect();
            let fields =
                toml::from_str::<Settings>(&format!("[[{section}]]\nno_such_setting = 1\n"))
                    .expect_err("unknown fields are rejected")
                    .to_string();
            let fields = fields.split_once("expected").map_or("", |(_, f)| f);
            for field in fields.split('`').skip(1).step_by(2) {
                assert!(
                    example.iter().any(|key| key == field),
                    "default.toml's [[{section}]] example does not show {field}"
                );
            }
            continue;
        }
        let entries = table
            .get(&section)
            .and_then(toml::Value::as_table)
            .unwrap_or_else(|| panic!("default.toml has no [{section}] table"));
        let examples = commented_examples(&text, &section);
        for field in expected_fields(Some(&section)) {
            assert!(
                entries.contains_key(&field) || examples.contains(&field),
                "default.toml neither sets nor shows {section}.{field}"
            );
        }
    }
}

// ---- the binary -------------------------------------------------------------------------

/// Distinct loopback addresses that were free a moment ago (bound together, then released).
fn free_addrs<const N: usize>() -> [SocketAddr; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("local addr"))
}

/// Writes a config file under the target's scratch directory.
fn write_config(name: &str, text: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("config_cli-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write the config file");
    path
}

fn config_listening_on(addr: SocketAddr) -> String {
    format!("[server]\nlisten = \"{addr}\"\nworkers = 1\n")
}

async fn assert_healthz(addr: SocketAddr) {
    let (status, body) = http_get(addr, "/healthz").await;
    assert_eq!(status, 200, "GET /healthz on {addr}");
    assert_eq!(body.trim_end(), "ok", "body {body:?}");
}

#[tokio::test]
async fn binary_serves_on_the_config_file_address() {
    let [addr] = free_addrs();
    let config = write_config("file-address", &config_listening_on(addr));
    let process = ServerProcess::spawn(&["--config", config.to_str().expect("utf-8 path")], &[]);
    assert_eq!(process.wait_listening(), addr, "bound the file's address");
    assert_healthz(addr).await;
}

#[tokio::test]
async fn env_overrides_the_file_and_the_flag_overrides_env() {
    let [file_addr, env_addr, flag_addr] = free_addrs();
    let config = write_config("overrides", &config_listening_on(file_addr));
    let config = config.to_str().expect("utf-8 path");
    let env_listen = env_addr.to_string();

    let process = ServerProcess::spawn(
        &["--config", config],
        &[("MCP_WS_LISTEN", env_listen.as_str())],
    );
    assert_eq!(process.wait_listening(), env_addr, "MCP_WS_LISTEN wins");
    assert_healthz(env_addr).await;
    drop(process);

    let process = ServerProcess::spawn(
        &["--config", config, "--listen", &flag_addr.to_string()],
        &[("MCP_WS_LISTEN", env_listen.as_str())],
    );
    assert_eq!(process.wait_listening(), flag_addr, "--listen wins");
    assert_healthz(flag_addr).await;
}

#[test]
fn invalid_config_exits_2_with_stderr_gone() {
    // A pipe whose reading end is closed before the binary starts: its message about the
    // config cannot be written (EPIPE), and the exit code must say what happened all the
    // same (`eprintln!` panicked there: 101).
    let zero = write_config("zero-batch-stderr-gone", "[limits]\nmax_batch_len = 0\n");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut binary = crate::support::interop::KillOnDrop(
        ServerProcess::command(&["--config", zero.to_str().expect("utf-8 path")], &[])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(writer)
            .spawn()
            .expect("the mcp-ws binary runs"),
    );
    // Bounded: a binary that took the config would serve until killed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = binary.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the binary did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2), "{status:?}");
}

/// Runs the binary expecting it to refuse to start: exit code 2, `needle` on stderr.
fn assert_refuses_to_start(args: &[&str], env: &[(&str, &str)], needle: &str) {
    let mut process = ServerProcess::spawn(args, env);
    let (status, stderr) = process.wait_exit();
    assert_eq!(
        status.code(),
        Some(2),
        "exit status {status:?}; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(needle),
        "stderr does not name the problem ({needle:?}):\n{stderr}"
    );
    assert!(
        !stderr.contains("listening"),
        "it must not start serving:\n{stderr}"
    );
}

#[test]
fn invalid_config_exits_2_naming_the_problem() {
    let unknown = write_config(
        "unknown-key",
        "[server]\nlisten = \"127.0.0.1:0\"\nlisten_adress = \"127.0.0.1:1\"\n",
    );
    assert_refuses_to_start(
        &["--config", unknown.to_str().expect("utf-8 path")],
        &[],
        "listen_adress",
    );

    let zero = write_config("zero-batch", "[limits]\nmax_batch_len = 0\n");
    assert_refuses_to_start(
        &["--config", zero.to_str().expect("utf-8 path")],
        &[],
        "limits.max_batch_len must be greater than 0",
    );

    let zero_size = write_config("zero-log-size", "[logging]\nfile_max_bytes = 0\n");
    assert_refuses_to_start(
        &["--config", zero_size.to_str().expect("utf-8 path")],
        &[],
        "logging.file_max_bytes must be greater than 0",
    );
    let no_state = write_config("zero-state-ttl", "[mrtr]\nstate_ttl_ms = 0\n");
    assert_refuses_to_start(
        &["--config", no_state.to_str().expect("utf-8 path")],
        &[],
        "mrtr.state_ttl_ms must be greater than 0",
    );
    // Past a year: no use, and (from the library, where u64 is allowed) it could wrap.
    let skew = write_config(
        "huge-skew",
        "[signatures]\nmax_skew_ms = 9223372036854775807\n",
    );
    assert_refuses_to_start(
        &["--config", skew.to_str().expect("utf-8 path")],
        &[],
        "signatures.max_skew_ms must be at most 31536000000 (a year)",
    );

    // A handshake timeout of 0 would close every TLS connection; past a minute, an idle
    // connection holds a handshake place longer than any client needs.
    let no_handshake = write_config(
        "zero-handshake-timeout",
        "[server]\ntls_handshake_timeout_ms = 0\n",
    );
    assert_refuses_to_start(
        &["--config", no_handshake.to_str().expect("utf-8 path")],
        &[],
        "server.tls_handshake_timeout_ms must be greater than 0",
    );
    let long_handshake = write_config(
        "long-handshake-timeout",
        "[server]\ntls_handshake_timeout_ms = 60001\n",
    );
    assert_refuses_to_start(
        &["--config", long_handshake.to_str().expect("utf-8 path")],
        &[],
        "server.tls_handshake_timeout_ms must be at most 60000 (a minute)",
    );

    let rotation = write_config("hourly-log", "[logging]\nfile_rotation = \"hourly\"\n");
    assert_refuses_to_start(
        &["--config", rotation.to_str().expect("utf-8 path")],
        &[],
        "unknown variant `hourly`",
    );

    // The budget of partly received messages must hold one message of the largest size.
    let budget = write_config(
        "small-partial-budget",
        "[limits]\nmax_message_bytes = 2048\nmax_partial_bytes = 1024\n",
    );
    assert_refuses_to_start(
        &["--config", budget.to_str().expect("utf-8 path")],
        &[],
        "limits.max_partial_bytes must be >= limits.max_message_bytes",
    );
    // So must one address's share of it.
    let share = write_config(
        "small-partial-share",
        "[limits]\nmax_message_bytes = 2048\nmax_partial_bytes_per_ip = 1024\n",
    );
    assert_refuses_to_start(
        &["--config", share.to_str().expect("utf-8 path")],
        &[],
        "limits.max_partial_bytes_per_ip must be 0 or >= limits.max_message_bytes",
    );

    let proxies = write_config(
        "bad-proxy",
        "[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n",
    );
    assert_refuses_to_start(
        &["--config", proxies.to_str().expect("utf-8 path")],
        &[],
        "server.trusted_proxies: \"10.0.0.0/33\"",
    );

    // A served file larger than the read budget could never be read: refused at start.
    let files = write_config(
        "file-over-read-budget",
        "[resources]\nmax_read_bytes_in_flight = 1000\n[[resources.directories]]\npath = \"/tmp\"\nmax_file_bytes = 1001\n",
    );
    assert_refuses_to_start(
        &["--config", files.to_str().expect("utf-8 path")],
        &[],
        "resources.directories: max_file_bytes of /tmp (1001) exceeds resources.max_read_bytes_in_flight (1000)",
    );

    // Counts past what a semaphore or actix can be made with: refused, not a panic at start.
    for (name, text, needle) in [
        (
            "huge-pool",
            "[limits]\nmax_concurrent_requests = 4611686018427387904\n",
            "limits.max_concurrent_requests must be at most 2305843009213693951",
        ),
        (
            "huge-tasks",
            "[tasks]\nmax_running = 4611686018427387904\n",
            "tasks.max_running must be at most 2305843009213693951",
        ),
        (
            "huge-upstream",
            "[[upstreams]]\nname = \"up\"\ncommand = \"cat\"\nmax_in_flight = 4611686018427387904\n",
            "upstreams.up.max_in_flight must be at most 2305843009213693951",
        ),
        (
            "many-workers",
            "[server]\nworkers = 100000\n",
            "server.workers must be at most 512",
        ),
    ] {
        let config = write_config(name, text);
        assert_refuses_to_start(&["--config", config.to_str().expect("utf-8 path")], &[], needle);
    }

    // A directory as the log file would be written beside it (`/tmp.2026-12-06`).
    let log_dir = write_config("log-file-a-directory", "[logging]\nfile = \"/tmp\"\n");
    assert_refuses_to_start(
        &["--config", log_dir.to_str().expect("utf-8 path")],
        &[],
        "logging.file: /tmp is a directory",
    );

    // The file named by MCP_WS_CONFIG is read too, and a missing one is an error.
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("config_cli-no-such-file.toml");
    let missing = missing.to_str().expect("utf-8 path");
    assert_refuses_to_start(
        &[],
        &[("MCP_WS_CONFIG", missing)],
        "cannot read config file",
    );

    assert_refuses_to_start(&["--listen", "not-an-address"], &[], "not-an-address");
}

/// A config file the parser refuses is named with the line and column of the fault, never
/// the line itself: a misspelled key, a missing quote or a wrong type on a line holding a
/// secret printed the secret to the log (the parser's message shows the line).
#[test]
fn a_refused_config_line_is_located_without_showing_the_secret_it_holds() {
    let secret = "hunter2-s3cr3t";
    let cases = [
        (
            "misspelled-key",
            format!("[redis]\nuri = \"redis://:{secret}@127.0.0.1:6379\"\n"),
            "line 2, column 1: unknown field `uri`",
        ),
        (
            "missing-quotes",
            format!("[redis]\nurl = redis://:{secret}@127.0.0.1:6379\n"),
            "line 2, column 7",
        ),
        (
            "a-string-for-a-table",
            format!(
                "[[upstreams]]\nname = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                 headers = \"Authorization: Bearer {secret}\"\n"
            ),
            "line 4, column 11: invalid type: string, expected a map",
        ),
        (
            "a-string-for-a-section",
            format!("redis = \"redis://:{secret}@127.0.0.1:6379\"\n"),
            "line 1, column 9: invalid type: string, expected struct RedisSettings",
        ),
        (
            "wrong-type",
            format!(
                "[[upstreams]]\nname = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                 [upstreams.headers]\nAuthorization = [\"Bearer {secret}\"]\n"
            ),
            "line 5, column 17",
        ),
    ];
    for (name, text, located) in cases {
        let file = write_config(name, &text);
        let mut process =
            ServerProcess::spawn(&["--config", file.to_str().expect("utf-8 path")], &[]);
        let (status, stderr) = process.wait_exit();
        assert_eq!(status.code(), Some(2), "{name}: {status:?}\n{stderr}");
        assert!(
            stderr.contains(located),
            "{name}: not located as {located:?}:\n{stderr}"
        );
        assert!(
            !stderr.contains(secret),
            "{name}: the secret is shown:\n{stderr}"
        );
    }
}

#[test]
fn help_lists_every_flag_with_its_environment_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-ws"))
        .arg("--help")
        .output()
        .expect("the mcp-ws binary runs");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("utf-8");
    for (flag, env) in [("--config", "MCP_WS_CONFIG"), ("--listen", "MCP_WS_LISTEN")] {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} is listed:\n{help}"));
        assert!(line.contains(&format!("[env: {env}=]")), "{line}");
    }
    for other in [
        "--help",
        "--version",
        "RUST_LOG",
        "WebSocket",
        "Streamable HTTP",
    ] {
        assert!(help.contains(other), "{other} is named:\n{help}");
    }
}

#[tokio::test]
async fn the_startup_log_names_the_config_the_builtin_set_and_both_endpoints() {
    let [addr] = free_addrs();
    let text = format!(
        "{}[builtins]\nset = \"conformance\"\n",
        config_listening_on(addr)
    );
    let config = write_config("startup-log", &text);
    let config = config.to_str().expect("utf-8 path");
    let process = ServerProcess::spawn(&["--config", config], &[]);
    assert_eq!(process.wait_listening(), addr);
    let log = process.stderr_text();
    for needle in [
        format!("config={config}"),
        "builtins=conformance".to_owned(),
        format!("ws://{addr}/mcp"),
        format!("http://{addr}/mcp"),
    ] {
        assert!(log.contains(&needle), "the log names {needle}:\n{log}");
    }
}

#[tokio::test]
async fn the_root_page_says_how_to_connect() {
    let server = start(settings());
    let addr = server.addr();
    let (status, page) = http_get(addr, "/").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("ws://{addr}/mcp")), "{page}");
    assert!(page.contains(&format!("http://{addr}/mcp")), "{page}");
    assert!(
        !page.contains(env!("CARGO_PKG_VERSION")),
        "no version: {page}"
    );
    // Under the endpoint's Host rules: a rebound name is not repeated back.
    let rebound = format!("evil.example:{}", addr.port());
    let (status, page) = http_get_with(addr, "/", &[("Host", &rebound)]).await;
    assert_eq!(status, 403, "{page}");
    // Nor is a forwarded host any client can write (it named the client's choice of site).
    let forwarded = [
        ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Proto", "https"),
        ("Forwarded", "host=evil.example;proto=https"),
    ];
    let (status, page) = http_get_with(addr, "/", &forwarded).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("ws://{addr}/mcp")), "{page}");
    assert!(!page.contains("evil.example"), "{page}");
    // From a trusted proxy, its word is taken.
    let mut behind = settings();
    behind.server.trusted_proxies = vec!["127.0.0.1/32".into()];
    let server = start(behind);
    let (status, page) = http_get_with(server.addr(), "/", &forwarded[..2]).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("wss://evil.example/mcp"), "{page}");
    assert!(page.contains("https://evil.example/mcp"), "{page}");
}

/// A `mrtr.state_key_file` that is empty (made, not yet written) or short is refused at
/// start: its states would be keyed with a key anyone can compute. One of 64 hex digits
/// starts the server.
#[test]
fn a_state_key_file_without_a_key_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, key) in [
        ("empty", ""),
        ("blank", " \n"),
        ("short", "0123456789abcdef\n"),
    ] {
        let key_file = dir.path().join(format!("{name}.key"));
        std::fs::write(&key_file, key).expect("key file written");
        let config = write_config(
            &format!("state-key-{name}"),
            &format!(
                "[server]\nlisten = \"127.0.0.1:0\"\n\n[mrtr]\nstate_key_file = \"{}\"\n",
                key_file.display()
            ),
        );
        assert_refuses_to_start(
            &["--config", config.to_str().expect("utf-8 path")],
            &[],
            "holds fewer than 32 characters",
        );
    }
    let key_file = dir.path().join("good.key");
    std::fs::write(&key_file, format!("{}\n", "a1".repeat(32))).expect("key file written");
    let config = write_config(
        "state-key-good",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[mrtr]\nstate_key_file = \"{}\"\n",
            key_file.display()
        ),
    );
    let server = ServerProcess::spawn(&["--config", config.to_str().expect("utf-8 path")], &[]);
    server.wait_listening();
}

/// The binary raises its soft limit on open files to the hard one, and says so: at the usual
/// 1024, one client's 1,100 idle connections made `accept` fail for every other client.
/// Where the hard limit is below what `server.max_sessions` needs, it warns.
#[test]
fn the_binary_raises_its_open_files_limit_to_the_hard_one() {
    let hard = open_files_limits(std::process::id()).1;
    assert!(
        hard > 256,
        "the hard limit of this machine ({hard}) leaves nothing to raise"
    );
    for (soft, hard_set) in [(256, hard), (256, 256)] {
        let mut command = ServerProcess::command(&["--listen", "127.0.0.1:0"], &[]);
        limit_open_files(&mut command, soft, hard_set);
        let server = ServerProcess::start(command);
        server.wait_listening();
        let (now_soft, now_hard) = open_files_limits(server.pid());
        assert_eq!((now_soft, now_hard), (hard_set, hard_set));
        let stderr = server.stderr_text();
        let raised = stderr.contains("open files: soft limit raised to the hard limit");
        assert_eq!(raised, hard_set > soft, "{stderr}");
        let warned =
            stderr.contains("open files: the limit is below what server.max_sessions needs");
        // The default max_sessions (10 000) and a margin of 64.
        assert_eq!(warned, hard_set < 10_064, "{stderr}");
    }
}
