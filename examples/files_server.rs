//! Serves the files of a directory as resources, watched for changes:
//!
//! ```sh
//! cargo run --example files_server -- DIR    # ws://127.0.0.1:8765/mcp until Ctrl-C
//! ```
//!
//! Every file under DIR is a `file://` resource; clients can list, read and subscribe to
//! them, and hear when files change, appear or go.

use mcp_ws::config::DirectorySettings;
use mcp_ws::{Server, Settings};
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: files_server DIR");
        return ExitCode::from(2);
    };
    mcp_ws::telemetry::init("info");
    let mut settings = Settings::default();
    settings
        .resources
        .directories
        .push(DirectorySettings::new(dir));
    let served = Server::builder()
        .settings(settings)
        .name("files")
        .build()
        .and_then(|server| server.run());
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("files_server: {error}");
            ExitCode::FAILURE
        }
    }
}
