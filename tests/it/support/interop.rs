//! What the interop tests share (`interop_ts_sdk`, `interop_py_sdk`, `interop_rmcp`): the server they drive, with the fixtures the clients' checks
//! need, the run of a client process over a [`Transport`] and the relay of what it asks the
//! server's owner to do, and the verdict over its report.
//!
//! A client prints one line per check (`ok NAME` or `FAIL NAME: reason`) and ends with
//! `N passed, M failed`. [`Transport::expected_checks`] is the contract: each of its names
//! must be reported passed, exactly once, and nothing else may be reported.
//!
//! Some checks need a change made by whoever owns the server, not by a request: a registry
//! change while the client is connected and idle, a resource update. The client asks for it
//! on stdout with a line `@registry ACTION`, and [`run_client`] makes the change through
//! [`RunningServer::registry`] as soon as it reads that line:
//!
//! | line | change |
//! |---|---|
//! | `@registry add` | adds the tool `interop_added`, the resource `interop://added`, the prompt `interop_added` |
//! | `@registry remove` | removes those three |
//! | `@registry updated URI` | `Registry::resource_updated(URI)` |
//!
//! The client then waits for the notifications these changes must cause, each with a
//! timeout, so a server that does not send one fails that client-side check.

use crate::support::{settings, start_with};
use mcp_ws::model::{
    CreateMessageRequest, ElicitRequest, GetPromptResult, PromptMessage, SamplingMessage,
};
use mcp_ws::prompt::PromptArguments;
use mcp_ws::{Prompt, PromptError, RequestContext, Resource, RunningServer, Tool, ToolError};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Every check a client runs on either transport; each must pass. The clients print exactly
/// these names.
pub const EXPECTED_CHECKS: &[&str] = &[
    "connect",
    "server-info",
    "tools/list",
    "tools/call echo",
    "tools/call add",
    "tools/call fail",
    "tools/call sleep with progress",
    "resources/list + resources/read",
    "prompts/list + prompts/get greet",
    "prompts/get greet missing argument -> -32602",
    "tools/call unknown tool -> -32602",
    "ping",
    "logging/setLevel debug",
    "roots/list answered inside a tool",
    "sampling/createMessage answered inside a tool",
    "elicitation/create answered inside a tool",
    "tools/list_changed after a tool is added",
    "resources/list_changed after a resource is added",
    "prompts/list_changed after a prompt is added",
    "tools/call a tool added at run time",
    "list_changed for each list after the additions are removed",
    "resources/updated for a subscribed resource only",
    "resources/unsubscribe stops its updates",
];

/// The checks a client runs only over Streamable HTTP.
pub const HTTP_CHECKS: &[&str] = &[
    "GET stream opened",
    "session ended with DELETE (its id is then unknown: 404)",
];

/// How a client reaches the server: the clients take `--transport ws|http` and the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `ws://ADDR/mcp`, one session per socket.
    WebSocket,
    /// `http://ADDR/mcp`, Streamable HTTP: a session-era session (`Mcp-Session-Id`), its
    /// `GET` stream, `DELETE` at the end.
    Http,
}

impl Transport {
    /// The value of the clients' `--transport`.
    pub fn flag(self) -> &'static str {
        match self {
            Transport::WebSocket => "ws",
            Transport::Http => "http",
        }
    }

    /// The server's endpoint for this transport.
    pub fn url(self, server: &RunningServer) -> String {
        match self {
            Transport::WebSocket => server.url(),
            Transport::Http => format!("http://{}/mcp", server.addr()),
        }
    }

    /// Every check a client must report passed over this transport.
    pub fn expected_checks(self) -> Vec<&'static str> {
        let extra: &[&str] = match self {
            Transport::WebSocket => &[],
            Transport::Http => HTTP_CHECKS,
        };
        EXPECTED_CHECKS.iter().chain(extra).copied().collect()
    }
}

/// How long a client may take, from start to exit.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The resources a client subscribes to.
const WATCHED: [&str; 2] = ["interop://watched/a", "interop://watched/b"];
/// What `@registry add` adds (and `remove` removes): one of each kind with a list.
const ADDED_TOOL: &str = "interop_added";
const ADDED_RESOURCE: &str = "interop://added";
const ADDED_PROMPT: &str = "interop_added";

/// The demo set, plus tools that ask the client something and answer what it said, plus the
/// resources a client subscribes to.
///
/// The heartbeat is slower than a client run, so nothing but a change itself wakes an idle
/// session to tell its client (a heartbeat ping would also make the session look at what
/// changed, and hide a change that forgot to wake it).
pub fn interop_server() -> RunningServer {
    let mut settings = settings();
    settings.heartbeat.interval_ms = 2 * CLIENT_TIMEOUT.as_millis() as u64;
    settings.heartbeat.client_timeout_ms = 4 * CLIENT_TIMEOUT.as_millis() as u64;
    start_with(settings, |builder| {
        let builder = builder
            .tool(Tool::new(
                "ask_roots",
                "Asks the client for its roots; answers them as JSON.",
                ask_roots,
            ))
            .tool(Tool::new(
                "ask_sampling",
                "Asks the client for a model completion of `prompt`; answers it as JSON.",
                ask_sampling,
            ))
            .tool(Tool::new(
                "ask_elicitation",
                "Asks the user for a profile (name, subscribe); answers their answer as JSON.",
                ask_elicitation,
            ));
        WATCHED.iter().fold(builder, |builder, uri| {
            builder.resource(Resource::text(*uri, "watched", "text/plain", "watch me"))
        })
    })
}

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArguments {}

async fn ask_roots(_: NoArguments, ctx: RequestContext) -> Result<String, ToolError> {
    let roots = ctx.list_roots().await?;
    Ok(json!({ "roots": roots }).to_string())
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SamplingArguments {
    /// The user message to send.
    prompt: String,
    /// `maxTokens` of the request.
    max_tokens: u32,
    /// `systemPrompt` of the request.
    system_prompt: String,
}

async fn ask_sampling(args: SamplingArguments, ctx: RequestContext) -> Result<String, ToolError> {
    let request =
        CreateMessageRequest::new(vec![SamplingMessage::user(args.prompt)], args.max_tokens)
            .system_prompt(args.system_prompt);
    let answer = ctx.create_message(request).await?;
    Ok(json!({
        "role": answer.role,
        "model": answer.model,
        "text": answer.content.as_text(),
        "stopReason": answer.stop_reason,
    })
    .to_string())
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ElicitationArguments {
    /// What to ask the user.
    message: String,
}

/// The form the user fills in.
#[allow(dead_code)] // only its schema is used
#[derive(schemars::JsonSchema)]
struct Profile {
    /// Your name.
    name: String,
    /// Whether to subscribe to the newsletter.
    subscribe: bool,
}

async fn ask_elicitation(
    args: ElicitationArguments,
    ctx: RequestContext,
) -> Result<String, ToolError> {
    let answer = ctx
        .elicit(ElicitRequest::form_for::<Profile>(args.message))
        .await?;
    Ok(json!({ "action": answer.action, "content": answer.content }).to_string())
}

async fn added_tool(_: NoArguments, _ctx: RequestContext) -> Result<String, ToolError> {
    Ok("added at run time".into())
}

async fn added_prompt(
    _: PromptArguments,
    _ctx: RequestContext,
) -> Result<GetPromptResult, PromptError> {
    Ok(GetPromptResult::new(vec![PromptMessage::user(
        "added at run time",
    )]))
}

/// Makes the change a client asked for with `@registry ACTION`.
pub fn apply(server: &RunningServer, action: &str) -> Result<(), String> {
    let registry = server.registry();
    match action.split_once(' ').unwrap_or((action, "")) {
        ("add", "") => {
            registry
                .add_tool(Tool::new(ADDED_TOOL, "Added at run time.", added_tool))
                .map_err(|e| e.to_string())?;
            registry
                .add_resource(Resource::text(
                    ADDED_RESOURCE,
                    "added",
                    "text/plain",
                    "added at run time",
                ))
                .map_err(|e| e.to_string())?;
            registry
                .add_prompt(Prompt::new(
                    ADDED_PROMPT,
                    "Added at run time.",
                    added_prompt,
                ))
                .map_err(|e| e.to_string())
        }
        ("remove", "") => {
            let removed = [
                registry.remove_tool(ADDED_TOOL),
                registry.remove_resource(ADDED_RESOURCE),
                registry.remove_prompt(ADDED_PROMPT),
            ];
            if removed.iter().all(|r| *r) {
                Ok(())
            } else {
                Err(format!(
                    "nothing to remove (tool, resource, prompt: {removed:?})"
                ))
            }
        }
        ("updated", uri) if !uri.is_empty() => {
            registry.resource_updated(uri);
            Ok(())
        }
        _ => Err("unknown action".into()),
    }
}

/// What a client process printed, and how it ended.
pub struct ClientRun {
    /// `None` when it did not finish within the time limit (it was killed).
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl ClientRun {
    /// Both outputs, for failure messages.
    pub fn report(&self) -> String {
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Kills the client if the test ends while it still runs.
/// A child process killed (and reaped) when this is dropped, however the test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// Runs `command` (a client, given `--transport` and the server's URL as its last arguments)
/// to the end, making the registry changes it asks for on the way. `what` names the client in
/// panics.
pub fn run_client(
    mut command: Command,
    server: &RunningServer,
    transport: Transport,
    what: &str,
) -> ClientRun {
    let child = command
        .args(["--transport", transport.flag()])
        .arg(transport.url(server))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {what}: {error}"));
    let mut child = KillOnDrop(child);
    let stderr = read_all(child.0.stderr.take().expect("piped stderr"));
    let stdout_pipe = child.0.stdout.take().expect("piped stdout");
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout_pipe).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut stdout = String::new();
    let mut finished = true;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                if let Some(action) = line.strip_prefix("@registry ") {
                    if let Err(error) = apply(server, action) {
                        panic!("{what} asked for `{line}`: {error}\n--- stdout ---\n{stdout}");
                    }
                }
                stdout.push_str(&line);
                stdout.push('\n');
            }
            // The client closed its stdout: it is exiting.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                finished = false;
                break;
            }
        }
    }
    let status = loop {
        if !finished || Instant::now() >= deadline {
            let _ = child.0.kill();
            let _ = child.0.wait();
            break None;
        }
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    ClientRun {
        status,
        stdout,
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// `N passed, M failed`.
fn parse_summary(line: &str) -> Option<(usize, usize)> {
    let (passed, failed) = line.split_once(", ")?;
    let passed = passed.strip_suffix(" passed")?.parse().ok()?;
    let failed = failed.strip_suffix(" failed")?.parse().ok()?;
    Some((passed, failed))
}

/// The client finished in time and successfully, reported every one of `expected` passed
/// (and nothing else), its summary agrees, and the server provoked no client-side protocol
/// error (`client error` on its stderr).
pub fn assert_every_check_passed(run: &ClientRun, expected: &[&str]) {
    let report = run.report();
    // Shown with `--nocapture`.
    println!("{report}");
    let status = run.status.unwrap_or_else(|| {
        panic!(
            "the client did not finish within {} s\n{report}",
            CLIENT_TIMEOUT.as_secs()
        )
    });

    let failures: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    assert!(
        failures.is_empty(),
        "failed checks: {failures:#?}\n{report}"
    );

    let mut passed: BTreeMap<&str, usize> = BTreeMap::new();
    for name in run.stdout.lines().filter_map(|l| l.strip_prefix("ok ")) {
        *passed.entry(name).or_default() += 1;
    }
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|name| !passed.contains_key(name))
        .collect();
    assert!(
        missing.is_empty(),
        "checks not passed: {missing:#?}\n{report}"
    );
    let unexpected: Vec<(&str, usize)> = passed
        .iter()
        .filter(|(name, count)| **count > 1 || !expected.contains(name))
        .map(|(name, count)| (*name, *count))
        .collect();
    assert!(
        unexpected.is_empty(),
        "checks reported twice or not expected: {unexpected:?}\n{report}"
    );

    let last = run
        .stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default();
    let summary = parse_summary(last)
        .unwrap_or_else(|| panic!("last line is not `N passed, M failed`: {last:?}\n{report}"));
    assert_eq!(summary, (expected.len(), 0), "summary\n{report}");
    assert!(status.success(), "client exit status {status}\n{report}");

    let client_errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("client error") || l.contains("close error"))
        .collect();
    assert!(
        client_errors.is_empty(),
        "the server provoked client-side errors: {client_errors:#?}\n{report}"
    );
}

/// `tests/interop`: the SDK clients and their lockfiles.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}
