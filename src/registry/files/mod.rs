//! Directories of files served as resources (`[[resources.directories]]`).
//!
//! Every regular file under a directory, recursively, is a resource: its URI is `file://`
//! and its canonical absolute path (percent-encoded), its name its path relative to the
//! directory, its MIME type guessed from its extension, its size listed. A read answers text
//! when the type is textual and the bytes are UTF-8, else a base64 blob, and refuses a file
//! over `max_file_bytes`, or whose answer would not fit in one message, with -32005. Reads
//! never wait on what is not a regular file and share bounded slots and bytes ([`read`]).
//! A watcher keeps the registry in step with the disk ([`watch`]).
//!
//! Containment is checked where it matters, when a file is listed and again when it is read,
//! since files change in between ([`Root::admit`], [`read`]):
//! - a file is served only if its canonical path is its own path (no link on the way) and
//!   lies inside the canonical directory. The walk does not follow links: a link to a file
//!   inside is that file, listed under its own path; a link to anything outside is neither
//!   listed nor read;
//! - a read never takes a path from the client: URIs are looked up among the listed ones, so
//!   a URI with `..` in it finds nothing;
//! - a name that is not UTF-8 has no URI: it is skipped;
//! - a hard link cannot be told from the file it links (see [`read`]): it is served.

mod read;
mod watch;

pub(crate) use watch::DirectoryWatch;

use self::read::ReadLimits;
use crate::config::{DirectorySettings, ResourceSettings};
use crate::registry::Registry;
use crate::resource::Resource;
use mime_guess::mime::{self, Mime};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the directories of `resources.directories` cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A directory does not exist, is not a directory, has a path that is not UTF-8, lies
    /// inside another, or cannot be watched.
    #[error("resources.directories: cannot serve {path}: {source}")]
    Directory {
        /// The directory, as configured.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file's resource could not be registered.
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    /// The watcher's thread could not be started.
    #[error("resources.directories: cannot start the watcher: {0}")]
    Io(#[from] std::io::Error),
}

/// Registers the files of `settings.directories` as resources and watches them; the returned
/// watch keeps them in step with the disk until it is dropped. `None` when there are none.
/// Their reads share the limits of `settings` and fit in `max_message_bytes` ([`read`]).
///
/// # Errors
/// [`ServeError::Directory`] when a directory does not exist, is not a directory, has a
/// path that is not UTF-8, lies inside another, or cannot be watched; [`ServeError::Registry`]
/// when a file's URI is already a registered resource.
pub(crate) fn serve_directories(
    registry: &Registry,
    settings: &ResourceSettings,
    max_message_bytes: usize,
) -> Result<Option<DirectoryWatch>, ServeError> {
    let directories = &settings.directories;
    if directories.is_empty() {
        return Ok(None);
    }
    let limits = Arc::new(ReadLimits::new(
        settings.max_concurrent_reads,
        std::time::Duration::from_millis(settings.read_wait_ms),
        settings.max_read_bytes_in_flight,
        max_message_bytes as u64,
    ));
    let roots = directories
        .iter()
        .map(|directory| Root::open(directory, limits.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, root) in roots.iter().enumerate() {
        if let Some(outer) = roots[..i]
            .iter()
            .chain(&roots[i + 1..])
            .find(|other| root.dir.starts_with(&other.dir))
        {
            // Both would serve the same files under the same URIs.
            return Err(root.error(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("it lies inside {}", outer.configured.display()),
            )));
        }
    }
    registry.offer_resources();
    DirectoryWatch::start(registry.clone(), roots.into_iter().map(Arc::new).collect()).map(Some)
}

/// One served directory.
pub(crate) struct Root {
    /// The directory, canonical.
    dir: PathBuf,
    /// The directory as configured, for messages.
    configured: PathBuf,
    max_file_bytes: u64,
    /// What every read of the server shares.
    limits: Arc<ReadLimits>,
}

impl Root {
    fn open(settings: &DirectorySettings, limits: Arc<ReadLimits>) -> Result<Self, ServeError> {
        let configured = settings.path.clone();
        let error = |source| ServeError::Directory {
            path: configured.clone(),
            source,
        };
        let dir = std::fs::canonicalize(&settings.path).map_err(error)?;
        if !std::fs::metadata(&dir).map_err(error)?.is_dir() {
            return Err(error(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        if dir.to_str().is_none() {
            return Err(error(io::Error::new(
                io::ErrorKind::InvalidData,
                "its path is not UTF-8, so its files have no file:// URI",
            )));
        }
        Ok(Self {
            dir,
            configured,
            max_file_bytes: settings.max_file_bytes,
            limits,
        })
    }

    fn error(&self, source: io::Error) -> ServeError {
        ServeError::Directory {
            path: self.configured.clone(),
            source,
        }
    }

    /// The size of the file at `path` if it may be served: a regular file whose canonical
    /// path is `path` itself (no link on the way, no `..`), inside the directory, with a
    /// UTF-8 name.
    fn admit(&self, path: &Path) -> Option<u64> {
        path.to_str()?;
        if path == self.dir || !path.starts_with(&self.dir) {
            return None;
        }
        if std::fs::canonicalize(path).ok()? != path {
            return None;
        }
        // `path` has no link in it, so this is the file itself.
        let metadata = std::fs::metadata(path).ok()?;
        metadata.is_file().then_some(metadata.len())
    }

    /// Every file under `dir` (the root or a directory inside it) that may be served, with
    /// its size. Links are not followed: what they point to inside is found on its own path.
    /// Each directory read is added to `read`.
    fn scan(&self, dir: &Path, read: &mut HashSet<PathBuf>) -> BTreeMap<PathBuf, u64> {
        let mut found = BTreeMap::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(error) => {
                    tracing::debug!(dir = %dir.display(), %error, "cannot list; skipped");
                    continue;
                }
            };
            read.insert(dir.clone());
            for entry in entries.flatten() {
                let path = entry.path();
                if path.to_str().is_none() {
                    tracing::debug!(path = %path.display(), "name is not UTF-8; skipped");
                    continue;
                }
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => pending.push(path),
                    Ok(kind) if kind.is_file() => {
                        if let Some(size) = self.admit(&path) {
                            found.insert(path, size);
                        }
                    }
                    // Links, sockets, pipes, devices: never served.
                    _ => {}
                }
            }
        }
        found
    }

    /// The resource of the admitted file at `path`.
    fn resource(self: &Arc<Self>, path: &Path, size: u64) -> Option<Resource> {
        let name = path.strip_prefix(&self.dir).ok()?.to_str()?;
        let mime = mime_guess::from_path(path).first_or_octet_stream();
        let reader = read::FileReader {
            root: self.clone(),
            path: path.into(),
            mime: mime.essence_str().into(),
            textual: is_textual(&mime),
        };
        Some(
            Resource::from_reader(file_uri(path)?, name, reader)
                .mime_type(mime.essence_str())
                .size(size),
        )
    }
}

/// `file://` and the path, percent-encoded outside RFC 3986's path characters.
fn file_uri(path: &Path) -> Option<String> {
    let path = path.to_str()?;
    let mut uri = String::with_capacity(path.len() + 7);
    uri.push_str("file://");
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            let _ = write!(uri, "%{byte:02X}");
        }
    }
    Some(uri)
}

/// Whether contents of this type are text (sent as text when they are UTF-8).
fn is_textual(mime: &Mime) -> bool {
    mime.type_() == mime::TEXT
        || matches!(mime.suffix().map(|s| s.as_str()), Some("json" | "xml"))
        || (mime.type_() == mime::APPLICATION
            && matches!(
                mime.subtype().as_str(),
                "json"
                    | "xml"
                    | "javascript"
                    | "ecmascript"
                    | "toml"
                    | "yaml"
                    | "x-yaml"
                    | "x-sh"
                    | "x-shellscript"
                    | "sql"
                    | "graphql"
                    | "x-tex"
                    | "x-latex"
            ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_percent_encoded_outside_path_characters() {
        assert_eq!(
            file_uri(Path::new("/srv/docs/a b#1?.txt")).as_deref(),
            Some("file:///srv/docs/a%20b%231%3F.txt")
        );
        assert_eq!(
            file_uri(Path::new("/srv/é/x_y-z~.md")).as_deref(),
            Some("file:///srv/%C3%A9/x_y-z~.md")
        );
    }

    #[test]
    fn textual_types_are_recognised() {
        for text in [
            "text/plain",
            "text/markdown",
            "application/json",
            "image/svg+xml",
            "application/ld+json",
            "application/toml",
        ] {
            assert!(is_textual(&text.parse().expect("mime")), "{text}");
        }
        for binary in ["image/png", "application/octet-stream", "application/pdf"] {
            assert!(!is_textual(&binary.parse().expect("mime")), "{binary}");
        }
    }
}
