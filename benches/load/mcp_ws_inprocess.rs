//! The one place that starts mcp-ws inside the bench process through the
//! library API (`mcp_ws::server::spawn`). Everything else treats the result
//! like any other in-process server.

use std::net::SocketAddr;

use crate::BoxError;

/// A running in-process mcp-ws.
pub struct McpWsServer {
    inner: Option<mcp_ws::server::RunningServer>,
    addr: SocketAddr,
}

impl McpWsServer {
    /// Default configuration, except an ephemeral loopback port.
    pub fn spawn() -> Result<Self, BoxError> {
        let mut settings = mcp_ws::config::Settings::default();
        settings.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let server = mcp_ws::server::spawn(settings)?;
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
