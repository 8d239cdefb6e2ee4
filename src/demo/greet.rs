//! The `greet` prompt, with one required argument `name` (and completion of it).

use mcp_ws::model::{GetPromptResult, PromptMessage};
use mcp_ws::resource::CompletionRequest;
use mcp_ws::{Prompt, PromptArgument, PromptError, RequestContext};

const KNOWN_NAMES: [&str; 5] = ["Ada", "Alan", "Barbara", "Grace", "Linus"];

async fn render(
    arguments: mcp_ws::prompt::PromptArguments,
    _ctx: RequestContext,
) -> Result<GetPromptResult, PromptError> {
    let name = arguments.get("name").map_or("", String::as_str);
    Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
        "Please greet {name} warmly."
    ))])
    .description("A warm greeting"))
}

async fn complete(request: CompletionRequest, _ctx: RequestContext) -> Vec<String> {
    if request.argument != "name" {
        return Vec::new();
    }
    KNOWN_NAMES
        .iter()
        .filter(|n| n.starts_with(&request.value))
        .map(|n| (*n).to_owned())
        .collect()
}

/// The prompt.
pub fn prompt() -> Prompt {
    Prompt::new("greet", "Asks the model to greet someone by name.", render)
        .argument(PromptArgument::required("name", "Who to greet."))
        .complete(complete)
}
