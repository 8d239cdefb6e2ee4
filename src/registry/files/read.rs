//! Reading a served file: on the blocking pool (a session's thread never waits on the disk),
//! with containment checked again, since the file may have been replaced by a link since it
//! was listed.

use super::Root;
use crate::context::RequestContext;
use crate::model::ResourceContents;
use crate::resource::{ResourceError, ResourceFuture, ResourceReader};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// Reads one listed file.
pub(super) struct FileReader {
    pub root: Arc<Root>,
    /// The file's canonical path, as listed.
    pub path: Arc<Path>,
    pub mime: Arc<str>,
    /// Whether the type is textual: such contents go as text when they are UTF-8.
    pub textual: bool,
}

impl ResourceReader for FileReader {
    fn read(&self, uri: &str, _ctx: RequestContext) -> ResourceFuture {
        let root = self.root.clone();
        let path = self.path.clone();
        let (uri, mime, textual) = (uri.to_owned(), self.mime.clone(), self.textual);
        Box::pin(async move {
            let bytes = tokio::task::spawn_blocking(move || root.read(&path))
                .await
                .map_err(|_| ResourceError::Failed("the read was stopped".into()))??;
            let contents = if textual {
                match String::from_utf8(bytes) {
                    Ok(text) => ResourceContents::text(uri, &*mime, text),
                    Err(not_utf8) => ResourceContents::blob(uri, &*mime, not_utf8.as_bytes()),
                }
            } else {
                ResourceContents::blob(uri, &*mime, &bytes)
            };
            Ok(vec![contents])
        })
    }
}

impl Root {
    /// The bytes of the listed file at `path` (blocking), if it is still a regular file at
    /// that canonical path inside the directory and no larger than the limit.
    pub(super) fn read(&self, path: &Path) -> Result<Vec<u8>, ResourceError> {
        // Not a link, nor a pipe that `open` would wait on.
        if !std::fs::symlink_metadata(path).map_err(refusal)?.is_file() {
            return Err(ResourceError::NotFound);
        }
        let mut file = File::open(path).map_err(refusal)?;
        // The path may have been swapped for a link between the check and the open: the
        // file opened must be the one now at `path`, which must still be its own canonical
        // path (no link on the way) inside the directory.
        let opened = file.metadata().map_err(refusal)?;
        let canonical = std::fs::canonicalize(path).map_err(refusal)?;
        let at_path = std::fs::metadata(&canonical).map_err(refusal)?;
        if canonical != path
            || !canonical.starts_with(&self.dir)
            || !opened.is_file()
            || (opened.dev(), opened.ino()) != (at_path.dev(), at_path.ino())
        {
            tracing::warn!(path = %path.display(), "refused a read: the file now leads elsewhere");
            return Err(ResourceError::NotFound);
        }
        let limit = self.max_file_bytes;
        if opened.len() > limit {
            return Err(ResourceError::TooLarge {
                size: opened.len(),
                limit,
            });
        }
        // It may grow while it is read: never take more than the limit and one byte.
        let mut bytes = Vec::with_capacity(opened.len() as usize);
        (&mut file)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(refusal)?;
        if bytes.len() as u64 > limit {
            let size = file
                .metadata()
                .map_or(0, |m| m.len())
                .max(bytes.len() as u64);
            return Err(ResourceError::TooLarge { size, limit });
        }
        Ok(bytes)
    }
}

/// A failed file operation as the client sees it: gone is not found; anything else says
/// what kind of failure it was, never the path or the OS's wording.
fn refusal(error: io::Error) -> ResourceError {
    match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => ResourceError::NotFound,
        kind => {
            tracing::debug!(%error, "file read failed");
            ResourceError::Failed(kind.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DirectorySettings;

    fn root(dir: &Path, max_file_bytes: u64) -> Root {
        Root::open(&DirectorySettings {
            path: dir.to_owned(),
            max_file_bytes,
        })
        .expect("a directory")
    }

    #[test]
    fn a_listed_file_replaced_by_a_link_to_outside_is_not_read() {
        let inside = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let root = root(inside.path(), 1024);
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "secret").expect("write");
        let listed = root.dir.join("notes.txt");
        std::fs::write(&listed, "notes").expect("write");
        assert_eq!(root.admit(&listed), Some(5));
        assert_eq!(root.read(&listed).expect("readable"), b"notes");

        std::fs::remove_file(&listed).expect("remove");
        std::os::unix::fs::symlink(&secret, &listed).expect("link");
        assert_eq!(root.admit(&listed), None);
        assert_eq!(root.read(&listed), Err(ResourceError::NotFound));
    }

    #[test]
    fn a_listed_file_under_a_directory_replaced_by_a_link_is_not_read() {
        let inside = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let root = root(inside.path(), 1024);
        std::fs::write(outside.path().join("a.txt"), "outside").expect("write");
        let sub = root.dir.join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        let listed = sub.join("a.txt");
        std::fs::write(&listed, "inside").expect("write");
        assert_eq!(root.read(&listed).expect("readable"), b"inside");

        std::fs::remove_dir_all(&sub).expect("remove");
        std::os::unix::fs::symlink(outside.path(), &sub).expect("link");
        assert_eq!(root.read(&listed), Err(ResourceError::NotFound));
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = root(dir.path(), 4);
        let path = root.dir.join("five.txt");
        std::fs::write(&path, "12345").expect("write");
        assert_eq!(
            root.read(&path),
            Err(ResourceError::TooLarge { size: 5, limit: 4 })
        );
        std::fs::write(&path, "1234").expect("write");
        assert_eq!(root.read(&path).expect("at the limit"), b"1234");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(root.read(&path), Err(ResourceError::NotFound));
    }
}
