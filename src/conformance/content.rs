//! Tools answering one kind of content each (scenarios `tools-call-simple-text`, `-image`,
//! `-audio`, `-embedded-resource`, `-mixed-content`), and the tool that fails
//! (`tools-call-error`).

use super::{NoArgs, TEST_AUDIO_WAV_BASE64, TEST_IMAGE_PNG_BASE64};
use mcp_ws::model::{CallToolResult, Content, ResourceContents};
use mcp_ws::{RequestContext, Tool, ToolError};

async fn simple_text(_: NoArgs, _: RequestContext) -> Result<&'static str, ToolError> {
    Ok("This is a simple text response for testing.")
}

async fn image(_: NoArgs, _: RequestContext) -> Result<Vec<Content>, ToolError> {
    Ok(vec![Content::image(TEST_IMAGE_PNG_BASE64, "image/png")])
}

async fn audio(_: NoArgs, _: RequestContext) -> Result<Vec<Content>, ToolError> {
    Ok(vec![Content::audio(TEST_AUDIO_WAV_BASE64, "audio/wav")])
}

async fn embedded_resource(_: NoArgs, _: RequestContext) -> Result<Vec<Content>, ToolError> {
    Ok(vec![Content::resource(ResourceContents::text(
        "test://embedded-resource",
        "text/plain",
        "This is an embedded resource content.",
    ))])
}

async fn multiple_content_types(_: NoArgs, _: RequestContext) -> Result<Vec<Content>, ToolError> {
    Ok(vec![
        Content::text("Multiple content types test:"),
        Content::image(TEST_IMAGE_PNG_BASE64, "image/png"),
        Content::resource(ResourceContents::text(
            "test://mixed-content-resource",
            "application/json",
            r#"{"test":"data","value":123}"#,
        )),
    ])
}

/// A failure the model can read: a result with `isError: true`, not a JSON-RPC error.
async fn error_handling(_: NoArgs, _: RequestContext) -> Result<CallToolResult, ToolError> {
    Err(ToolError::failed(
        "This tool intentionally returns an error for testing",
    ))
}

/// The tools.
pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "test_simple_text",
            "Tests simple text content response",
            simple_text,
        ),
        Tool::new("test_image_content", "Tests image content response", image),
        Tool::new("test_audio_content", "Tests audio content response", audio),
        Tool::new(
            "test_embedded_resource",
            "Tests embedded resource content response",
            embedded_resource,
        ),
        Tool::new(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            multiple_content_types,
        ),
        Tool::new(
            "test_error_handling",
            "Tests error response handling",
            error_handling,
        ),
    ]
}
