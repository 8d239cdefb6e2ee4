//! What the server tells its operators: the [`access`] log of requests, the Prometheus
//! [`metrics`], the log setup ([`telemetry`]), its background writer ([`log_writer`]) and
//! file ([`log_file`]), and [`trace`] ids. It records what the layers above hand it and
//! decides nothing about a request.

pub mod access;
pub(crate) mod log_file;
pub(crate) mod log_writer;
pub mod metrics;
pub mod telemetry;
pub mod trace;
