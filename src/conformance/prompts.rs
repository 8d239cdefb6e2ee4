//! The prompts of scenarios `prompts-list`, `prompts-get-simple`, `-with-args`,
//! `-embedded-resource`, `-with-image` and `completion-complete`; and the prompt that asks the
//! user for input (`input-required-result-non-tool-request`, 2026-07-28).

use super::TEST_IMAGE_PNG_BASE64;
use mcp_ws::model::{
    Content, ElicitRequest, GetPromptResult, PromptMessage, ResourceContents, Role,
};
use mcp_ws::prompt::PromptArguments;
use mcp_ws::resource::CompletionRequest;
use mcp_ws::{Prompt, PromptArgument, PromptError, RequestContext};
use serde_json::json;

/// What completion offers for `test_prompt_with_arguments`' arguments: the values the
/// `prompts-get-with-args` scenario sends, and the example of `completion-complete`.
const ARGUMENT_CANDIDATES: [&str; 5] = ["paris", "park", "party", "testValue1", "testValue2"];

fn argument(arguments: &PromptArguments, name: &str) -> String {
    arguments.get(name).cloned().unwrap_or_default()
}

async fn simple(_: PromptArguments, _: RequestContext) -> Result<GetPromptResult, PromptError> {
    Ok(GetPromptResult::new(vec![PromptMessage::user(
        "This is a simple prompt for testing.",
    )]))
}

async fn with_arguments(
    arguments: PromptArguments,
    _: RequestContext,
) -> Result<GetPromptResult, PromptError> {
    let (arg1, arg2) = (argument(&arguments, "arg1"), argument(&arguments, "arg2"));
    Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
        "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    ))]))
}

/// Candidates starting with what was typed, for either argument.
async fn complete_arguments(request: CompletionRequest, _: RequestContext) -> Vec<String> {
    ARGUMENT_CANDIDATES
        .iter()
        .filter(|candidate| candidate.starts_with(&request.value))
        .map(|candidate| (*candidate).to_owned())
        .collect()
}

async fn with_embedded_resource(
    arguments: PromptArguments,
    _: RequestContext,
) -> Result<GetPromptResult, PromptError> {
    let uri = argument(&arguments, "resourceUri");
    Ok(GetPromptResult::new(vec![
        PromptMessage::new(
            Role::User,
            Content::resource(ResourceContents::text(
                uri,
                "text/plain",
                "Embedded resource content for testing.",
            )),
        ),
        PromptMessage::user("Please process the embedded resource above."),
    ]))
}

async fn with_image(_: PromptArguments, _: RequestContext) -> Result<GetPromptResult, PromptError> {
    Ok(GetPromptResult::new(vec![
        PromptMessage::new(
            Role::User,
            Content::image(TEST_IMAGE_PNG_BASE64, "image/png"),
        ),
        PromptMessage::user("Please analyze the image above."),
    ]))
}

/// Asks the user for the context to render with (2026-07-28: input key `user_context`).
async fn input_required(
    _: PromptArguments,
    ctx: RequestContext,
) -> Result<GetPromptResult, PromptError> {
    let form = json!({
        "type": "object",
        "properties": {"context": {"type": "string"}},
        "required": ["context"]
    });
    let answer = ctx
        .elicit_as(
            "user_context",
            ElicitRequest::form("What context should the prompt use?", form),
        )
        .await
        .map_err(|e| PromptError::Failed(e.to_string()))?;
    let context = answer
        .content
        .as_ref()
        .and_then(|content| content.get("context"))
        .and_then(|value| value.as_str())
        .ok_or_else(|| PromptError::Failed("no context was given".into()))?;
    Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
        "Prompt with context: {context}"
    ))]))
}

/// The prompts.
pub(super) fn prompts() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "test_simple_prompt",
            "A simple prompt without arguments",
            simple,
        )
        .title("Simple Test Prompt"),
        Prompt::new(
            "test_prompt_with_arguments",
            "A prompt with required arguments",
            with_arguments,
        )
        .title("Prompt With Arguments")
        .argument(PromptArgument::required("arg1", "First test argument"))
        .argument(PromptArgument::required("arg2", "Second test argument"))
        .complete(complete_arguments),
        Prompt::new(
            "test_prompt_with_embedded_resource",
            "A prompt that includes an embedded resource",
            with_embedded_resource,
        )
        .title("Prompt With Embedded Resource")
        .argument(PromptArgument::required(
            "resourceUri",
            "URI of the resource to embed",
        )),
        Prompt::new(
            "test_prompt_with_image",
            "A prompt that includes image content",
            with_image,
        )
        .title("Prompt With Image"),
        Prompt::new(
            "test_input_required_result_prompt",
            "A prompt that asks the user for the context it renders with",
            input_required,
        )
        .title("Prompt Requiring Input"),
    ]
}
