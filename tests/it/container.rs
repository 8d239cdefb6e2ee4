//! The `Dockerfile`, checked without Docker (the machines that run these tests have no Docker
//! daemon and no registry to pull its base images from):
//! - its shape: a build stage on a Rust image no older than the crate's `rust-version`, a run
//!   stage that runs as an unprivileged user, exposes the port it listens on and checks
//!   `/healthz`;
//! - its run stage played out here: the binary started as the image starts it (its
//!   `ENTRYPOINT`, its `ENV`, a `WORKDIR` holding what its `COPY` puts there, an unprivileged
//!   uid, and none of the variables the image does not set) serves the MCP endpoint on the
//!   image's listen address, and the `HEALTHCHECK`'s own command succeeds;
//! - the lock file builds with the crate's `rust-version`, which the image's Rust must meet:
//!   every locked package needs no newer Rust.
//!
//! Not checked here: that the base images exist, that the build stage builds in them, that
//! `apt-get` in the run stage finds curl. `tests/container/build-offline.sh` checks those on
//! a machine with no registry, by making the base images from Debian and rustup first.

use crate::support::process::ServerProcess;
use crate::support::*;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One instruction of a Dockerfile: its keyword (upper case) and the rest of it, with line
/// continuations joined.
struct Instruction {
    keyword: String,
    args: String,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(start) => {
                current.push_str(start.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(line);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined
        .into_iter()
        .map(|line| {
            let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            Instruction {
                keyword: keyword.to_ascii_uppercase(),
                args: args.trim().to_owned(),
            }
        })
        .collect()
}

/// The Dockerfile's stages, each the instructions from its `FROM` on.
fn stages(instructions: &[Instruction]) -> Vec<&[Instruction]> {
    let starts: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, i)| i.keyword == "FROM")
        .map(|(n, _)| n)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| &instructions[start..*starts.get(k + 1).unwrap_or(&instructions.len())])
        .collect()
}

fn args_of<'a>(stage: &'a [Instruction], keyword: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .collect()
}

/// `major.minor[.patch]` as a triple (patch 0 when left out).
fn version(text: &str) -> (u32, u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().expect("a number"));
    (
        parts.next().expect("major"),
        parts.next().expect("minor"),
        parts.next().unwrap_or(0),
    )
}

/// The crate's `rust-version`, from Cargo.toml.
fn rust_version(root: &Path) -> String {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("rust-version")
}

/// Every package of the lock file that this platform builds (the server's dependencies, the
/// tests' and the benches') needs no newer Rust than the crate's `rust-version`: the image
/// builds with `--locked`, so one newer release taken by `cargo update` made its build fail
/// while the tests, on a newer toolchain, passed (`.cargo/config.toml` now has `cargo update`
/// keep to it). Reads `cargo metadata`, which fetches what the cache lacks.
#[test]
fn every_locked_package_builds_with_the_crates_rust_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let needed = rust_version(root);
    let rustc = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    let rustc = String::from_utf8(rustc.stdout).expect("UTF-8");
    let host = rustc
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc's host triple");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let metadata = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", host])
        .current_dir(root)
        .output()
        .expect("cargo metadata");
    assert!(
        metadata.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).expect("cargo metadata's JSON");
    let resolved: std::collections::HashSet<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .filter_map(|node| node["id"].as_str())
        .collect();
    let packages = metadata["packages"].as_array().expect("packages");
    let mut too_new = Vec::new();
    for package in packages {
        let id = package["id"].as_str().expect("id");
        let Some(wanted) = package["rust_version"].as_str() else {
            continue;
        };
        if resolved.contains(id) && version(wanted) > version(&needed) {
            let name = package["name"].as_str().unwrap_or_default();
            let release = package["version"].as_str().unwrap_or_default();
            too_new.push(format!("{name} {release} needs {wanted}"));
        }
    }
    assert!(resolved.len() > 100, "the whole graph: {}", resolved.len());
    assert!(
        too_new.is_empty(),
        "rust-version is {needed}, but the lock file holds: {too_new:?}"
    );
}

/// The port of `host:port` or of a URL's authority.
fn port_of(text: &str) -> u16 {
    text.rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {text:?}"))
}

#[tokio::test]
async fn the_dockerfile_has_two_stages_and_its_run_stage_serves_unprivileged_and_passes_its_health_check(
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("a Dockerfile");
    let all = instructions(&dockerfile);
    let stages = stages(&all);
    assert_eq!(stages.len(), 2, "a build stage and a run stage");
    let (build, run) = (stages[0], stages[1]);

    // The build stage: a Rust image the crate builds with, building the binary.
    let from = args_of(build, "FROM")[0];
    let (image, alias) = from.split_once(" AS ").expect("FROM rust:… AS build");
    let rust = image
        .strip_prefix("rust:")
        .and_then(|tag| tag.split('-').next())
        .unwrap_or_else(|| panic!("a rust image: {image}"));
    let needed = rust_version(root);
    assert!(
        version(rust) >= version(&needed),
        "the image's Rust {rust} is older than rust-version {needed}"
    );
    assert!(
        args_of(build, "RUN")
            .iter()
            .any(|r| r.contains("cargo build --release --locked") && r.contains("--bin mcp-ws")),
        "the build stage builds the binary"
    );

    // The run stage: an unprivileged user it runs as, the files it copies, the port it
    // listens on, the health check.
    let useradd = args_of(run, "RUN")
        .into_iter()
        .find(|r| r.contains("useradd"))
        .expect("the run stage adds its user");
    let words: Vec<&str> = useradd.split_whitespace().collect();
    let uid: u32 = words
        .windows(2)
        .find(|w| w[0] == "--uid")
        .map(|w| w[1].parse().expect("a uid"))
        .expect("useradd --uid");
    assert_ne!(uid, 0, "not root");
    let user = *words
        .iter()
        .skip_while(|w| **w != "useradd")
        .last()
        .expect("the user's name");
    assert_eq!(args_of(run, "USER"), [user], "runs as {user}");
    let workdir = args_of(run, "WORKDIR")[0];
    let env: HashMap<&str, &str> = args_of(run, "ENV")
        .iter()
        .filter_map(|e| e.split_once('='))
        .collect();
    let listen = env["MCP_WS_LISTEN"];
    assert!(listen.starts_with("0.0.0.0:"), "all interfaces: {listen}");
    let exposed: u16 = args_of(run, "EXPOSE")[0].parse().expect("EXPOSE port");
    assert_eq!(
        port_of(listen),
        exposed,
        "it listens on the port it exposes"
    );
    let healthcheck = args_of(run, "HEALTHCHECK")[0];
    let check = healthcheck
        .split_once("CMD ")
        .map(|(_, command)| command)
        .expect("HEALTHCHECK … CMD");
    let url = check
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the health check's URL");
    assert!(url.ends_with("/healthz"), "{url}");
    assert_eq!(
        port_of(url),
        exposed,
        "the health check asks the exposed port"
    );
    let entrypoint: Vec<String> =
        serde_json::from_str(args_of(run, "ENTRYPOINT")[0]).expect("ENTRYPOINT [\"…\"]");
    assert!(
        args_of(run, "CMD").is_empty(),
        "no arguments beyond the entrypoint"
    );
    let copies: Vec<(&str, &str)> = args_of(run, "COPY")
        .iter()
        .filter(|c| !c.starts_with("--from"))
        .map(|c| c.split_once(' ').expect("COPY SRC DEST"))
        .collect();
    let binary = args_of(run, "COPY")
        .iter()
        .find(|c| c.starts_with(&format!("--from={alias} ")))
        .map(|c| c.split_whitespace().last().expect("its destination"))
        .expect("the binary copied from the build stage");
    assert_eq!(
        entrypoint,
        [binary],
        "the entrypoint is the binary copied over"
    );

    // The run stage here: its WORKDIR a fresh directory with what COPY puts under it, the
    // binary run as the image runs it, on a free port in place of the image's (the tests run
    // side by side), as the image's uid when this runs as root.
    let app = tempfile::TempDir::new().expect("tempdir");
    for (source, destination) in &copies {
        let relative = destination
            .strip_prefix(workdir)
            .and_then(|d| d.strip_prefix('/'))
            .unwrap_or_else(|| panic!("{destination} is under {workdir}"));
        let target = app.path().join(relative);
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(root.join(source), &target).expect("copy");
    }
    let mut command = as_unprivileged(uid, app.path());
    command
        .current_dir(app.path())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        // Port 0: the kernel picks a free one as the server binds (a port found free here
        // could be another test's by then).
        .env("MCP_WS_LISTEN", listen.replace(&exposed.to_string(), "0"));
    for (name, value) in env.iter().filter(|(name, _)| **name != "MCP_WS_LISTEN") {
        command.env(name, value);
    }
    let server = ServerProcess::start(command);
    let addr = server.wait_listening();
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .expect("the server's /proc status");
    let running_as: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .expect("its uid");
    assert_ne!(running_as, 0, "the server does not run as root");
    let port = addr.port();
    assert!(addr.ip().is_unspecified(), "all interfaces: {addr}");
    let log = server.stderr_text();
    assert!(
        log.contains("config/default.toml"),
        "it reads the config the image copies:\n{log}"
    );

    // The health check, as the image runs it (curl, on this port).
    let check = check.replace(&format!(":{exposed}/"), &format!(":{port}/"));
    let status = Command::new("sh")
        .args(["-c", &check])
        .status()
        .expect("sh runs the health check");
    assert!(status.success(), "{check}: {status}");

    // And the endpoint answers an MCP client on that port.
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut client = Client::connect_url(&format!("ws://{local}/mcp")).await;
    let init = client
        .request_with_id(json!(1), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!(1));
}

/// The binary, to be run as `uid` when this process is root (with `setpriv`), else as the
/// current (unprivileged) user; `dir` made readable to it.
fn as_unprivileged(uid: u32, dir: &Path) -> Command {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let binary = env!("CARGO_BIN_EXE_mcp-ws");
    // `/proc/self` belongs to this process's effective uid.
    let root = std::fs::metadata("/proc/self").expect("/proc/self").uid() == 0;
    if !root {
        return Command::new(binary);
    }
    for entry in walk(dir) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(binary);
    command
}

/// `dir` and everything under it.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    let mut at = 0;
    while at < all.len() {
        if all[at].is_dir() {
            let entries = std::fs::read_dir(&all[at]).expect("read_dir");
            all.extend(entries.map(|e| e.expect("entry").path()));
        }
        at += 1;
    }
    all
}
