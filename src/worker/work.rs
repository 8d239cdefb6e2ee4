//! What a worker runs ([`Work`]), and the future it becomes once the worker has the
//! request's context ([`WorkFuture`]).
//!
//! Most work is a closure that makes a boxed future: each method's work is a type of its own,
//! held in one `Job`, and it runs after the frame it came from is gone. That costs two
//! allocations, the closure's box and the future's. A session-era `tools/call`, the hot path,
//! is held as what it is instead ([`ToolCall`]): the tool's handler and arguments, and how
//! the session turns the tool's outcome into the answer frame. Its future is the tool's own
//! (boxed by the `ToolHandler` trait), polled inside the worker's; nothing else is
//! allocated for it (benches/README.md, "What a request allocates"). The worker's own
//! future, boxed once, grows to hold it (408 → 560 bytes in a test build, with the catch of
//! a handler that panics as it is called; `size_of_val` printed by a throw-away change): a
//! longer copy into that box, against two allocations.

use crate::context::RequestContext;
use crate::model::CallToolResult;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::{Error, ProtocolVersion};
use crate::tool::{Arguments, ToolError, ToolFuture, ToolHandler};
use futures_util::future::LocalBoxFuture;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// A request's outcome: the encoded response frame (serialized straight into the frame, see
/// `jsonrpc::encode_result_with`), or an error.
pub type Outcome = Result<String, Error>;

/// The work a worker runs, given the request's id and context: see the module docs.
pub enum Work {
    /// A session-era `tools/call`.
    ToolCall(ToolCall),
    /// Any other work: given the request's id and context, its future.
    Other(Box<dyn FnOnce(RequestId, RequestContext) -> LocalBoxFuture<'static, Outcome>>),
}

impl Work {
    /// Work made by `make` once the request's id and context are there.
    pub fn new(
        make: impl FnOnce(RequestId, RequestContext) -> LocalBoxFuture<'static, Outcome> + 'static,
    ) -> Self {
        Self::Other(Box::new(make))
    }

    /// Starts the work of the request `id`, with its context.
    pub fn start(self, id: RequestId, ctx: RequestContext) -> WorkFuture {
        match self {
            Self::ToolCall(call) => WorkFuture::ToolCall(ToolCallFuture {
                tool: call.handler.call(call.arguments, ctx),
                answer: call.answer,
                id,
                version: call.version,
                size_hint: call.size_hint,
            }),
            Self::Other(make) => WorkFuture::Other(make(id, ctx)),
        }
    }
}

/// Turns a tool's outcome into the answer frame of request `id`, for `version`, its first
/// allocation sized by `size_hint`.
pub type Answer =
    fn(&RequestId, Result<CallToolResult, ToolError>, ProtocolVersion, usize) -> Outcome;

/// A session-era `tools/call`, as [`Work::ToolCall`] holds it.
pub struct ToolCall {
    /// The tool.
    pub handler: Arc<dyn ToolHandler>,
    /// Its arguments.
    pub arguments: Arguments,
    /// How its outcome becomes the answer (the session's rule, not the worker's).
    pub answer: Answer,
    /// The session's protocol version, which the result is encoded for.
    pub version: ProtocolVersion,
    /// The answer frame's expected length.
    pub size_hint: usize,
}

/// Started [`Work`].
pub enum WorkFuture {
    /// A tool call's: the tool's future, then its answer.
    ToolCall(ToolCallFuture),
    /// Any other work's future.
    Other(LocalBoxFuture<'static, Outcome>),
}

impl Future for WorkFuture {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        // Both variants are `Unpin` (boxed futures and plain values).
        match self.get_mut() {
            Self::ToolCall(call) => Pin::new(call).poll(cx),
            Self::Other(future) => future.as_mut().poll(cx),
        }
    }
}

/// A started tool call: see [`WorkFuture::ToolCall`].
pub struct ToolCallFuture {
    tool: ToolFuture,
    answer: Answer,
    id: RequestId,
    version: ProtocolVersion,
    size_hint: usize,
}

impl Future for ToolCallFuture {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let outcome = ready!(self.tool.as_mut().poll(cx));
        Poll::Ready((self.answer)(
            &self.id,
            outcome,
            self.version,
            self.size_hint,
        ))
    }
}
