//! The fixtures of the official MCP conformance suite's server scenarios
//! (`@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha.12), with the names, arguments,
//! texts, MIME types and client requests those scenarios check. `config/conformance.toml`
//! selects this set (`builtins.set = "conformance"`). A module of the binary, not of the
//! library; the tests include it by path.
//!
//! Everything here goes through the public API, like any user of the crate:
//!
//! - `content`: tools answering each kind of content block, and the failing tool;
//! - `interaction`: tools that log, report progress, or ask the client (sampling,
//!   elicitation, with the SEP-1034 defaults and SEP-1330 enums);
//! - `resources`: the static text and binary resources, the watched resource and the
//!   `test://template/{id}/data` template;
//! - `prompts`: the four prompts, and the completion of `test_prompt_with_arguments`;
//! - `draft`: the tools the 2026-07-28 scenarios call (`server-stateless`, the
//!   `input-required-result-*` family, `json-schema-2020-12`, the custom-header and
//!   reconnection probes). They are ordinary tools asking through their context; what the
//!   2026-07-28 wire adds (input-required results, request state, `_meta` capabilities) is
//!   the protocol core's job, not theirs;
//! - `tasks`: the tools the `tasks-*` scenarios (the tasks extension) call.

mod content;
mod draft;
mod interaction;
mod prompts;
mod resources;
mod tasks;

use mcp_ws::ServerBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

/// A 1×1 red PNG (RGBA), base64: the image of every image fixture.
pub const TEST_IMAGE_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A WAV file of one silent sample (PCM, mono, 16-bit, 8 kHz), base64: the audio fixture.
/// (The suite's reference server sends a header announcing a sample it leaves out; this one
/// carries it, so the file is complete.)
pub const TEST_AUDIO_WAV_BASE64: &str =
    "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==";

/// Arguments of the fixtures that take none. Unknown members are ignored: the suite's
/// probes may send more than a fixture reads.
#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// Adds the conformance fixtures.
///
/// ```
/// let server = mcp_ws::builtins::conformance::fixtures(mcp_ws::Server::builder()).build();
/// assert!(server.is_ok());
/// ```
pub fn fixtures(builder: ServerBuilder) -> ServerBuilder {
    let registry = builder.registry();
    let builder = content::tools()
        .into_iter()
        .chain(interaction::tools())
        .chain(draft::tools())
        .chain(draft::triggers(registry))
        .chain(tasks::tools())
        .fold(builder, ServerBuilder::tool);
    let builder = resources::resources()
        .into_iter()
        .fold(builder, ServerBuilder::resource)
        .resource_template(resources::template());
    prompts::prompts()
        .into_iter()
        .fold(builder, ServerBuilder::prompt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn decode(base64: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(base64)
            .expect("valid base64")
    }

    #[test]
    fn the_image_is_a_one_pixel_png() {
        let png = decode(TEST_IMAGE_PNG_BASE64);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        let width = u32::from_be_bytes(png[16..20].try_into().expect("4 bytes"));
        let height = u32::from_be_bytes(png[20..24].try_into().expect("4 bytes"));
        assert_eq!((width, height), (1, 1));
        assert_eq!(&png[png.len() - 8..png.len() - 4], b"IEND");
    }

    #[test]
    fn the_audio_is_a_complete_pcm_wav() {
        let wav = decode(TEST_AUDIO_WAV_BASE64);
        let u16_at = |i: usize| u16::from_le_bytes([wav[i], wav[i + 1]]) as u32;
        let u32_at = |i: usize| u32::from_le_bytes(wav[i..i + 4].try_into().expect("4 bytes"));
        assert_eq!(&wav[0..4], b"RIFF");
        assert_eq!(u32_at(4) as usize, wav.len() - 8, "RIFF size");
        assert_eq!(&wav[8..16], b"WAVEfmt ");
        let (format, channels, rate, byte_rate, align, bits) = (
            u16_at(20),
            u16_at(22),
            u32_at(24),
            u32_at(28),
            u16_at(32),
            u16_at(34),
        );
        assert_eq!(format, 1, "PCM");
        assert_eq!(align, channels * bits / 8);
        assert_eq!(byte_rate, rate * align);
        assert_eq!(&wav[36..40], b"data");
        assert_eq!(u32_at(40) as usize, wav.len() - 44, "data size");
        assert_eq!((wav.len() - 44) % align as usize, 0, "whole samples");
    }
}
