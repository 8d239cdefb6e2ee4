//! Failures to start the server: a bad configuration or an address that cannot be bound.
//! Never sent to a client (request errors are `mcp::Error`).

/// Failures to start the server (not sent to any client).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}
