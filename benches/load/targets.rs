//! Turns a `--targets` entry into a live endpoint: an external server given
//! by URL (+ pid), or a server started in this process on the chosen cores.
//! Also knows where each target's RSS and CPU time can be read.

use std::collections::HashSet;
use std::net::SocketAddr;

use crate::baseline::BaselineServer;
use crate::cli::{Args, BaselineKind, TargetKind};
use crate::client::{Endpoint, ReplyStyle};
use crate::mcp_ws_inprocess::McpWsServer;
use crate::{sys, BoxError};

/// Name prefix of the client runtime's threads, so their CPU time is not
/// attributed to an in-process server.
pub const CLIENT_THREAD_NAME: &str = "load-client";

impl TargetKind {
    /// The raw-echo baseline answers with the request itself.
    pub fn reply_style(self) -> ReplyStyle {
        match self {
            TargetKind::RawEcho => ReplyStyle::EchoedRequest,
            TargetKind::McpWs
            | TargetKind::ActixInline
            | TargetKind::ActixNaive
            | TargetKind::Jsonrpsee => ReplyStyle::JsonRpc,
        }
    }

    /// jsonrpsee never selects a subprotocol (see [`Endpoint`]).
    pub fn offers_subprotocol(self) -> bool {
        self != TargetKind::Jsonrpsee
    }

    /// The URL (and pid) of this target when it runs outside this process.
    pub fn external(self, args: &Args) -> Option<(&str, Option<u32>)> {
        let (url, pid) = match self {
            TargetKind::McpWs => (&args.url, args.server_pid),
            TargetKind::RawEcho => (&args.raw_echo_url, args.raw_echo_pid),
            TargetKind::ActixInline => (&args.actix_inline_url, args.actix_inline_pid),
            TargetKind::ActixNaive => (&args.actix_naive_url, args.actix_naive_pid),
            TargetKind::Jsonrpsee => (&args.jsonrpsee_url, args.jsonrpsee_pid),
        };
        url.as_deref().map(|url| (url, pid))
    }
}

/// Where the server's resources are accounted.
#[derive(Debug, Clone)]
pub enum Placement {
    /// Threads of this process; those that existed before the server was
    /// started (and client threads) are not the server's.
    InProcess {
        threads_before: HashSet<u32>,
    },
    External {
        pid: Option<u32>,
    },
}

impl Placement {
    pub fn label(&self) -> String {
        match self {
            Placement::InProcess { .. } => "in-process".into(),
            Placement::External { pid: Some(pid) } => format!("external pid {pid}"),
            Placement::External { pid: None } => "external".into(),
        }
    }

    /// RSS of the process hosting the server. In-process this includes the
    /// client side of every connection (see README).
    pub fn rss_kib(&self) -> Option<u64> {
        match self {
            Placement::InProcess { .. } => sys::rss_kib(std::process::id()).ok(),
            Placement::External { pid } => pid.and_then(|pid| sys::rss_kib(pid).ok()),
        }
    }

    /// CPU ticks used so far by the server threads.
    pub fn server_cpu_ticks(&self) -> Option<u64> {
        match self {
            Placement::InProcess { threads_before } => {
                Some(sys::threads_cpu_ticks(threads_before, CLIENT_THREAD_NAME))
            }
            Placement::External { pid } => pid.and_then(sys::process_cpu_ticks),
        }
    }

    /// CPU ticks used so far by the load generator itself.
    pub fn client_cpu_ticks(&self) -> Option<u64> {
        let own = sys::own_cpu_ticks()?;
        match self {
            Placement::InProcess { .. } => Some(own.saturating_sub(self.server_cpu_ticks()?)),
            Placement::External { .. } => Some(own),
        }
    }
}

enum InProcessServer {
    Baseline(BaselineServer),
    McpWs(Box<McpWsServer>),
}

/// A target ready to take load.
pub struct LiveTarget {
    pub endpoint: Endpoint,
    pub placement: Placement,
    server: Option<InProcessServer>,
}

impl LiveTarget {
    /// Uses the external URL if one was given, else starts the server here.
    /// Must be called outside any tokio runtime (servers bring their own).
    pub fn start(kind: TargetKind, args: &Args) -> Result<Self, BoxError> {
        let endpoint = |url: &str| -> Result<Endpoint, BoxError> {
            let mut endpoint = Endpoint::new(url, kind.offers_subprotocol(), kind.reply_style())?;
            if kind == TargetKind::McpWs {
                endpoint.era = args.era.era();
                endpoint.idempotency_run = args.idempotency_keys.then(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |since| since.as_nanos() as u64)
                });
            }
            Ok(endpoint)
        };
        if let Some((url, pid)) = kind.external(args) {
            return Ok(Self {
                endpoint: endpoint(url)?,
                placement: Placement::External { pid },
                server: None,
            });
        }
        let threads_before = sys::own_thread_ids();
        let server = spawn_on_server_cpus(kind, args)?;
        let addr = match &server {
            InProcessServer::Baseline(server) => server.addr(),
            InProcessServer::McpWs(server) => server.addr(),
        };
        let url = format!("ws://{addr}/mcp");
        Ok(Self {
            endpoint: endpoint(&url)?,
            placement: Placement::InProcess { threads_before },
            server: Some(server),
        })
    }

    pub fn stop(mut self) {
        match self.server.take() {
            Some(InProcessServer::Baseline(server)) => server.stop(),
            Some(InProcessServer::McpWs(server)) => server.stop(),
            None => {}
        }
    }
}

/// Starts the server with the calling thread temporarily pinned to
/// `--server-cpus`: the server's threads inherit that mask when they are
/// created, and the calling thread gets its previous mask back.
fn spawn_on_server_cpus(kind: TargetKind, args: &Args) -> Result<InProcessServer, BoxError> {
    let restore = match &args.server_cpus {
        Some(cpus) => {
            let previous = sys::current_thread_cpus()?;
            sys::pin_current_thread(cpus)?;
            Some(previous)
        }
        None => None,
    };
    let ephemeral = SocketAddr::from(([127, 0, 0, 1], 0));
    let baseline = |kind| BaselineServer::spawn(kind, ephemeral).map(InProcessServer::Baseline);
    let spawned = match kind {
        TargetKind::McpWs => McpWsServer::spawn().map(|s| InProcessServer::McpWs(Box::new(s))),
        TargetKind::RawEcho => baseline(BaselineKind::RawEcho),
        TargetKind::ActixInline => baseline(BaselineKind::ActixInline),
        TargetKind::ActixNaive => baseline(BaselineKind::ActixNaive),
        TargetKind::Jsonrpsee => baseline(BaselineKind::Jsonrpsee),
    };
    if let Some(previous) = restore {
        sys::pin_current_thread(&previous)?;
    }
    spawned
}
