//! The 2026-07-28 server under test (`stateless_ws`, `stateless_http`, `stateless_mrtr`): the demo
//! set plus tools, a prompt and a resource that ask the client for input, log, report
//! progress or wait for a gate, with an identity and caching hints that are not the
//! defaults.
//!
//! Everything here drives the real server through real sockets; nothing is mocked.

use super::{settings, start_with, NoArgs};
use mcp_ws::model::{
    CallToolResult, CreateMessageRequest, ElicitAction, ElicitRequest, GetPromptResult, LogLevel,
    PromptMessage, ResourceContents, SamplingMessage,
};
use mcp_ws::{
    Prompt, PromptArgument, PromptError, RequestContext, Resource, ResourceError, ResourceTemplate,
    RunningServer, ServerBuilder, Settings, Tool, ToolError,
};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// How the server under test presents itself (not the defaults, so that a result naming
/// them shows the configuration reached it).
pub const SERVER_NAME: &str = "stateless-under-test";
pub const SERVER_VERSION: &str = "7.7.7";
pub const INSTRUCTIONS: &str = "Ask for a name with ask_name; read mcp-ws-test://vault.";
/// The caching hints configured for the server under test (none of them the default).
pub const DISCOVER_TTL_MS: u64 = 4321;
pub const LIST_TTL_MS: u64 = 1234;
pub const READ_TTL_MS: u64 = 567;
pub const CACHE_SCOPE: &str = "private";

pub const README: &str = "mcp-ws://demo/readme";
pub const VAULT: &str = "mcp-ws-test://vault";
pub const NOTES_TEMPLATE: &str = "mcp-ws-test://notes/{id}";

/// The `_meta` member the `with_meta` tool puts in its result.
pub const TOOL_META_KEY: &str = "example.com/annotation";

// ---------------------------------------------------------------------------------------
// The server under test.

/// Settings of the server under test: its identity, instructions, caching hints (none of
/// them the default), and unthrottled progress (every report is sent, so the frames of a
/// request are known in advance).
pub fn stateless_settings() -> Settings {
    let mut s = settings();
    s.info.name = SERVER_NAME.into();
    s.info.version = SERVER_VERSION.into();
    s.info.instructions = INSTRUCTIONS.into();
    s.cache.discover_ttl_ms = DISCOVER_TTL_MS;
    s.cache.list_ttl_ms = LIST_TTL_MS;
    s.cache.read_ttl_ms = READ_TTL_MS;
    s.cache.scope = CACHE_SCOPE.into();
    s.progress.min_interval_ms = 0;
    s
}

/// What the tests look at in the server's tools: how often the asking tools ran (each
/// round of a multi round-trip request runs the tool again), and the gate `step_then_hold`
/// waits for.
#[derive(Clone)]
pub struct Fixtures {
    pub runs: Arc<AtomicUsize>,
    pub gate: Arc<Semaphore>,
}

impl Default for Fixtures {
    fn default() -> Self {
        Self {
            runs: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Fixtures {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// The demo set plus [`add_fixtures`], with `settings`.
pub fn start_stateless(settings: Settings) -> (RunningServer, Fixtures) {
    let fixtures = Fixtures::default();
    let server = start_with(settings, |b| add_fixtures(b, &fixtures));
    (server, fixtures)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct NameForm {
    /// Your name.
    pub name: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct PassphraseForm {
    /// The vault's passphrase.
    pub passphrase: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct GreetingArgs {
    /// How to greet.
    pub greeting: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct StepsArgs {
    pub n: u32,
}

/// Asks for a name (ask key `name`) and greets with it; says so when the user declines or
/// cancels. One tool for both eras: a session-era session gets an `elicitation/create`
/// request, a 2026-07-28 request an `InputRequiredResult`.
async fn ask_name(
    args: GreetingArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let request = ElicitRequest::form_for::<NameForm>("What is your name?");
    let answer = ctx.elicit_as("name", request).await?;
    Ok(match answer.action {
        ElicitAction::Accept => {
            let form: NameForm = answer
                .parse()
                .ok_or_else(|| ToolError::failed("an accepted form without a name"))?;
            format!("{}, {}!", args.greeting, form.name)
        }
        ElicitAction::Decline => format!("{}, whoever you are (declined)", args.greeting),
        ElicitAction::Cancel => format!("{}, whoever you are (cancelled)", args.greeting),
    })
}

/// Three asks, each built from the answer before: a name (`name`, elicitation), a model's
/// line about that name (`draft`, sampling), the client's roots (`roots`).
async fn interview(
    _: NoArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let name = ctx
        .elicit_as("name", ElicitRequest::form_for::<NameForm>("Who are you?"))
        .await?
        .parse::<NameForm>()
        .map_or_else(|| "nobody".to_owned(), |form| form.name);
    let draft = ctx
        .create_message_as(
            "draft",
            CreateMessageRequest::new(
                vec![SamplingMessage::user(format!(
                    "Write one line about {name}."
                ))],
                50,
            ),
        )
        .await?;
    let line = draft.content.as_text().unwrap_or("").to_owned();
    let roots = ctx.list_roots_as("roots").await?;
    let roots: Vec<&str> = roots.iter().map(|r| r.uri.as_str()).collect();
    Ok(format!(
        "name={name}; draft={line}; roots={}",
        roots.join(",")
    ))
}

/// Asks two things at once (`left`: a name, `right`: the roots): one round asks both.
async fn two_at_once(
    _: NoArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let (name, roots) = futures_util::future::join(
        ctx.elicit_as("left", ElicitRequest::form_for::<NameForm>("Name?")),
        ctx.list_roots_as("right"),
    )
    .await;
    let name = name?.parse::<NameForm>().map_or(String::new(), |f| f.name);
    Ok(format!("{name} in {} roots", roots?.len()))
}

/// Logs one line at each of debug, info, warning and error (data `"<level> line"`).
async fn chatty(_: NoArgs, ctx: RequestContext) -> Result<&'static str, ToolError> {
    for (level, data) in [
        (LogLevel::Debug, "debug line"),
        (LogLevel::Info, "info line"),
        (LogLevel::Warning, "warning line"),
        (LogLevel::Error, "error line"),
    ] {
        ctx.log(level, data);
    }
    Ok("chatted")
}

/// Reports progress 1..=n of n, with the message `step i`, then answers.
async fn steps(args: StepsArgs, ctx: RequestContext) -> Result<String, ToolError> {
    for step in 1..=args.n {
        let message = format!("step {step}");
        ctx.report_progress(f64::from(step), Some(f64::from(args.n)), Some(&message));
    }
    Ok(format!("stepped {}", args.n))
}

/// Reports progress 1 of 2, then waits until the test opens the gate.
fn step_then_hold(gate: Arc<Semaphore>) -> Tool {
    Tool::new(
        "step_then_hold",
        "Progress 1 of 2, then waits for the test's gate.",
        move |_: NoArgs, ctx: RequestContext| {
            let gate = gate.clone();
            async move {
                ctx.report_progress(1.0, Some(2.0), None);
                let _permit = gate
                    .acquire()
                    .await
                    .map_err(|_| ToolError::failed("gate closed"))?;
                Ok("released")
            }
        },
    )
}

/// A tool that answers `done` at once (to change the registry with).
pub fn plain_tool(name: &str) -> Tool {
    Tool::new(name, "Answers at once.", |_: NoArgs, _ctx| async {
        Ok::<_, ToolError>("done")
    })
}

/// Adds the test's tools, prompt, resource and template to `builder`.
pub fn add_fixtures(builder: ServerBuilder, fixtures: &Fixtures) -> ServerBuilder {
    let runs = fixtures.runs.clone();
    let ask_name_tool = |name: &'static str| {
        let runs = runs.clone();
        Tool::new(name, "Asks for a name and greets.", move |args, ctx| {
            ask_name(args, ctx, runs.clone())
        })
    };
    let interview_runs = runs.clone();
    let two_runs = runs.clone();
    let prompt_runs = runs.clone();
    let vault_runs = runs.clone();
    builder
        .tool(ask_name_tool("ask_name"))
        .tool(ask_name_tool("ask_name_too"))
        .tool(Tool::new(
            "interview",
            "Asks a name, a model, the roots.",
            move |args, ctx| interview(args, ctx, interview_runs.clone()),
        ))
        .tool(Tool::new(
            "two_at_once",
            "Asks two things at once.",
            move |args, ctx| two_at_once(args, ctx, two_runs.clone()),
        ))
        .tool(Tool::new("chatty", "Logs at four levels.", chatty))
        .tool(Tool::new(
            "with_meta",
            "Answers with a result `_meta` of its own.",
            |_: NoArgs, _ctx| async move {
                let mut result = CallToolResult::text("annotated");
                result.meta = Some(json!({TOOL_META_KEY: "kept"}));
                Ok::<_, ToolError>(result)
            },
        ))
        .tool(Tool::new("steps", "Reports n progress steps.", steps))
        .tool(step_then_hold(fixtures.gate.clone()))
        .prompt(
            Prompt::new(
                "personal",
                "Asks whom it is for.",
                move |arguments, ctx: RequestContext| {
                    let runs = prompt_runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let answer = ctx
                            .elicit_as("name", ElicitRequest::form_for::<NameForm>("For whom?"))
                            .await
                            .map_err(|e| PromptError::Failed(e.to_string()))?;
                        let name = answer
                            .parse::<NameForm>()
                            .map_or_else(|| "someone".to_owned(), |f| f.name);
                        let topic = arguments.get("topic").cloned().unwrap_or_default();
                        Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
                            "Tell {name} about {topic}."
                        ))]))
                    }
                },
            )
            .argument(PromptArgument::required("topic", "What about.")),
        )
        .resource(Resource::new(VAULT, "vault", move |ctx: RequestContext| {
            let runs = vault_runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let answer = ctx
                    .elicit_as(
                        "passphrase",
                        ElicitRequest::form_for::<PassphraseForm>("The passphrase?"),
                    )
                    .await
                    .map_err(|e| ResourceError::Failed(e.to_string()))?;
                let form: PassphraseForm = answer
                    .parse()
                    .ok_or_else(|| ResourceError::Failed("no passphrase".into()))?;
                Ok(ResourceContents::text(
                    VAULT,
                    "text/plain",
                    format!("opened with {}", form.passphrase),
                ))
            }
        }))
        .resource_template(ResourceTemplate::new(
            NOTES_TEMPLATE,
            "notes",
            |uri: String, variables: mcp_ws::resource::TemplateVariables, _ctx| async move {
                let id = variables.get("id").cloned().unwrap_or_default();
                Ok(ResourceContents::text(
                    uri,
                    "text/plain",
                    format!("note {id}"),
                ))
            },
        ))
}
