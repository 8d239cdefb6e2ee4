//! The resources of scenarios `resources-list`, `resources-read-text`,
//! `resources-read-binary`, `resources-subscribe` / `-unsubscribe` (the watched resource)
//! and `resources-templates-read` (the template).

use super::TEST_IMAGE_PNG_BASE64;
use mcp_ws::model::ResourceContents;
use mcp_ws::{Resource, ResourceTemplate};
use serde::Serialize;

const BINARY_URI: &str = "test://static-binary";

/// The fixed resources.
pub(super) fn resources() -> Vec<Resource> {
    vec![
        Resource::text(
            "test://static-text",
            "static-text",
            "text/plain",
            "This is the content of the static text resource.",
        )
        .title("Static Text Resource")
        .description("A static text resource for testing"),
        // Built from the base64 the image tools send, so every fixture shows the same image.
        Resource::new(BINARY_URI, "static-binary", |_ctx| async {
            Ok(ResourceContents::blob_base64(
                BINARY_URI,
                "image/png",
                TEST_IMAGE_PNG_BASE64.to_owned(),
            ))
        })
        .mime_type("image/png")
        .title("Static Binary Resource")
        .description("A static binary resource (image) for testing"),
        Resource::text(
            "test://watched-resource",
            "watched-resource",
            "text/plain",
            "Watched resource content",
        )
        .title("Watched Resource")
        .description("A resource clients subscribe to"),
    ]
}

/// What `test://template/{id}/data` reads as, in the reference's member order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TemplateData<'a> {
    id: &'a str,
    template_test: bool,
    data: String,
}

/// `test://template/{id}/data`: JSON naming the id it was read with.
pub(super) fn template() -> ResourceTemplate {
    ResourceTemplate::new(
        "test://template/{id}/data",
        "template",
        |uri, variables, _ctx| async move {
            let id = variables.get("id").map_or("", String::as_str);
            let data = TemplateData {
                id,
                template_test: true,
                data: format!("Data for ID: {id}"),
            };
            let text = serde_json::to_string(&data)
                .map_err(|e| mcp_ws::ResourceError::Failed(e.to_string()))?;
            Ok(ResourceContents::text(uri, "application/json", text))
        },
    )
    .mime_type("application/json")
    .title("Resource Template")
    .description("A resource template with parameter substitution")
}
