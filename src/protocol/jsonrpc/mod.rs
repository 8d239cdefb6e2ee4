//! JSON-RPC 2.0 on the wire, and nothing else: decoding a text frame into classified
//! messages, error objects with their codes, and encoding responses with the request's id
//! spliced back byte-exact. This layer knows no MCP method and does no IO.
//!
//! Frames are measured against [`FrameLimits`] (one byte scan, before any parse) and a batch
//! is counted while it is parsed, so a hostile frame is refused before it is held whole.
//!
//! Spec: <https://www.jsonrpc.org/specification>.

mod decode;
mod encode;
mod error;
mod id;
mod limits;

#[cfg(any(test, feature = "testing"))]
pub use decode::decode;
pub use decode::{decode_with, Decoded, EagerParams, Entry, Notification, Params, Request};
pub use encode::{
    encode_batch, encode_error, encode_notification, encode_result, encode_result_members,
    encode_result_with, result_of,
};
pub use error::{ErrorCode, ErrorObject, WireError};
pub use id::{RequestId, MAX_ID_BYTES};
#[cfg(feature = "testing")]
pub use limits::Exceeded;
pub use limits::{FrameLimits, JsonLimit};
