//! Why a server could not be built or run: a bad configuration, a refused registration, an
//! address that cannot be bound. Never sent to a client (what a client is answered with is
//! `mcp::Error`, mapped to the wire in one place).

/// Why a server could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The settings are invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A tool, resource, template or prompt could not be registered.
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    /// A directory of `resources.directories` cannot be served: it does not exist, is not a
    /// directory, has a path that is not UTF-8, lies inside another, or cannot be watched.
    #[error("resources.directories: cannot serve {path}: {source}")]
    ResourceDirectory {
        /// The directory, as configured.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An upstream of `[[upstreams]]` cannot be started, or does not answer as an MCP server.
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

impl From<crate::registry::files::ServeError> for Error {
    fn from(error: crate::registry::files::ServeError) -> Self {
        use crate::registry::files::ServeError;
        match error {
            ServeError::Directory { path, source } => Self::ResourceDirectory { path, source },
            ServeError::Registry(refused) => Self::Registry(refused),
            ServeError::Io(source) => Self::Io(source),
        }
    }
}
