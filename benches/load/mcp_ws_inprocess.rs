//! The one place that starts mcp-ws inside the bench process through the
//! library API (`mcp_ws::Server`, with the demo set). Everything else treats the result
//! like any other in-process server.

use std::net::SocketAddr;

use crate::BoxError;

/// A running in-process mcp-ws.
pub struct McpWsServer {
    inner: Option<mcp_ws::RunningServer>,
    addr: SocketAddr,
}

impl McpWsServer {
    /// Default configuration, except an ephemeral loopback port.
    pub fn spawn() -> Result<Self, BoxError> {
        let mut settings = mcp_ws::Settings::default();
        settings.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let server = crate::demo::demo(mcp_ws::Server::builder().settings(settings))
            .build()?
            .spawn()?;
        let addr = server.addr();
        Ok(Self {
            inner: Some(server),
            addr,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Graceful stop; blocks until the server's threads are done.
    pub fn stop(mut self) {
        if let Some(server) = self.inner.take() {
            server.stop();
        }
    }
}
