//! Directories of files served as resources.

use crate::config::DirectorySettings;
use crate::registry::Registry;

/// Registers the files of `directories` and watches them.
pub fn serve_directories(
    _registry: &Registry,
    directories: &[DirectorySettings],
) -> Result<(), crate::Error> {
    if directories.is_empty() {
        return Ok(());
    }
    Err(crate::Error::Io(std::io::Error::other(
        "directories are not served yet",
    )))
}
