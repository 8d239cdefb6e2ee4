//! Reading a served file: on the blocking pool (a session's thread never waits on the
//! disk), within limits every read of the server shares ([`ReadLimits`]), with containment
//! checked again, since the file may have been replaced since it was listed.
//!
//! - The file is opened with `O_NONBLOCK | O_NOFOLLOW`, so a FIFO (or a device) swapped in
//!   under a listed name never holds a thread in `open`, and a link swapped in is not
//!   followed; then the opened descriptor is `fstat`ed and anything but a regular file is
//!   refused. Checking what was opened, not the path, means a swap after the check cannot
//!   matter. (Regular files ignore `O_NONBLOCK`.)
//! - At most `resources.max_concurrent_reads` files are read at once, server-wide; a read
//!   that finds no free slot within `resources.read_wait_ms` is refused (-32008, `fileReads`),
//!   never queued without bound. The slot is held by the blocking thread until it is done,
//!   even when the request is gone, so slow disks hold slots, never more threads.
//! - The bytes of files being read are at most `resources.max_read_bytes_in_flight`,
//!   server-wide (each read counts its file's size until its answer is made); a read over
//!   it is refused (-32008, `fileBytes`).
//! - An answer must fit in one message (`limits.max_message_bytes`): a file whose contents,
//!   encoded (base64 for a blob, JSON escapes for text) with [`ENVELOPE_BYTES`] and its URI,
//!   would not fit is refused (-32005 naming the setting), before it is read when its size
//!   alone says so.
//! - A hard link is the file itself (the same inode under another name): one made inside a
//!   directory to a file outside it cannot be told from a file created there, and is
//!   served. Keep untrusted users from creating files in served directories (or keep
//!   `fs.protected_hardlinks` on, so nobody links files they do not own).

use super::Root;
use crate::context::RequestContext;
use crate::model::ResourceContents;
use crate::resource::{BusyScope, ResourceError, ResourceFuture, ResourceReader};
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What an answer takes besides its contents and URI: `jsonrpc`, `id`, `result`, the
/// members' names, `mimeType`, `_meta`. An id longer than about half of it could take a
/// frame over the limit by that much.
pub(crate) const ENVELOPE_BYTES: u64 = 2048;

/// The limits every file read of the server shares (see the module docs).
pub(crate) struct ReadLimits {
    reads: Arc<Semaphore>,
    max_reads: usize,
    wait: Duration,
    bytes: Arc<Semaphore>,
    max_bytes: u64,
    max_message_bytes: u64,
}

impl ReadLimits {
    pub(crate) fn new(
        max_reads: usize,
        wait: Duration,
        max_bytes: u64,
        max_message_bytes: u64,
    ) -> Self {
        let max_reads = max_reads.clamp(1, Semaphore::MAX_PERMITS);
        let budget = usize::try_from(max_bytes)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Self {
            reads: Arc::new(Semaphore::new(max_reads)),
            max_reads,
            wait,
            bytes: Arc::new(Semaphore::new(budget)),
            max_bytes,
            max_message_bytes,
        }
    }

    /// Reads free now (tests).
    #[cfg(test)]
    pub(crate) fn free_reads(&self) -> usize {
        self.reads.available_permits()
    }
}

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
            let limits = root.limits.clone();
            let slot = tokio::time::timeout(limits.wait, limits.reads.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or(ResourceError::Busy {
                    scope: BusyScope::FileReads,
                    limit: limits.max_reads as u64,
                })?;
            let envelope = ENVELOPE_BYTES + json_string_bytes(&uri) + json_string_bytes(&mime);
            let (bytes, _budget) = tokio::task::spawn_blocking(move || {
                // Held until the thread is done, even if the request is gone by then.
                let _slot = slot;
                root.read(&path, textual, envelope)
            })
            .await
            .map_err(|_| ResourceError::Failed("the read was stopped".into()))??;
            let size = bytes.len() as u64;
            let (contents, encoded) = if textual {
                match String::from_utf8(bytes) {
                    Ok(text) => {
                        let encoded = json_string_bytes(&text);
                        (ResourceContents::text(uri, &*mime, text), encoded)
                    }
                    Err(not_utf8) => (
                        ResourceContents::blob(uri, &*mime, not_utf8.as_bytes()),
                        base64_bytes(size),
                    ),
                }
            } else {
                (
                    ResourceContents::blob(uri, &*mime, &bytes),
                    base64_bytes(size),
                )
            };
            let limit = limits.max_message_bytes;
            if envelope + encoded > limit {
                return Err(ResourceError::OverMessageLimit {
                    size,
                    encoded: envelope + encoded,
                    limit,
                });
            }
            Ok(vec![contents])
        })
    }
}

impl Root {
    /// The bytes of the listed file at `path` (blocking), with its share of the bytes in
    /// flight, if it is still a regular file at that canonical path inside the directory,
    /// no larger than `max_file_bytes`, and small enough for its answer (`envelope` bytes
    /// besides its contents) to fit in a message.
    pub(super) fn read(
        &self,
        path: &Path,
        textual: bool,
        envelope: u64,
    ) -> Result<(Vec<u8>, OwnedSemaphorePermit), ResourceError> {
        // Never waits (a FIFO or a device swapped in), never follows a link at the end.
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(path)
            .map_err(refusal)?;
        // What was opened, whatever the path holds now.
        let opened = file.metadata().map_err(refusal)?;
        if !opened.is_file() {
            tracing::warn!(path = %path.display(), "refused a read: not a regular file");
            return Err(ResourceError::Failed("not a regular file".into()));
        }
        // A link may be on the way (a directory swapped for one): the file opened must be
        // the one now at `path`, which must still be its own canonical path inside the
        // directory.
        let canonical = std::fs::canonicalize(path).map_err(refusal)?;
        let at_path = std::fs::metadata(&canonical).map_err(refusal)?;
        if canonical != path
            || !canonical.starts_with(&self.dir)
            || (opened.dev(), opened.ino()) != (at_path.dev(), at_path.ino())
        {
            tracing::warn!(path = %path.display(), "refused a read: the file now leads elsewhere");
            return Err(ResourceError::NotFound);
        }
        let size = opened.len();
        let limit = self.max_file_bytes;
        if size > limit {
            return Err(ResourceError::TooLarge { size, limit });
        }
        let max_message = self.limits.max_message_bytes;
        // The least its answer can take: text is never shorter than its bytes.
        let least = envelope + if textual { size } else { base64_bytes(size) };
        if least > max_message {
            return Err(ResourceError::OverMessageLimit {
                size,
                encoded: least,
                limit: max_message,
            });
        }
        let busy = || ResourceError::Busy {
            scope: BusyScope::FileBytes,
            limit: self.limits.max_bytes,
        };
        let budget = self
            .limits
            .bytes
            .clone()
            .try_acquire_many_owned(u32::try_from(size).map_err(|_| busy())?)
            .map_err(|_| busy())?;
        // It may grow while it is read: never take more than its size and one byte.
        let mut bytes = Vec::with_capacity(size as usize);
        (&mut file)
            .take(size.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(refusal)?;
        if bytes.len() as u64 > size {
            let now = file.metadata().map_or(0, |m| m.len()).max(size + 1);
            if now > limit {
                return Err(ResourceError::TooLarge { size: now, limit });
            }
            return Err(ResourceError::Failed(
                "the file grew while it was read, retry".into(),
            ));
        }
        Ok((bytes, budget))
    }
}

/// The length of base64 of `n` bytes, with its quotes.
fn base64_bytes(n: u64) -> u64 {
    n.div_ceil(3) * 4 + 2
}

/// The length of `text` as a JSON string, quotes and escapes included (as serde_json
/// writes it: `"`, `\\` and the short control escapes take 2 bytes, other controls 6).
fn json_string_bytes(text: &str) -> u64 {
    let escapes: u64 = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0..=0x1f => 5,
            _ => 0,
        })
        .sum();
    text.len() as u64 + escapes + 2
}

/// A failed file operation as the client sees it: gone (or a link now) is not found;
/// anything else says what kind of failure it was, never the path or the OS's wording.
fn refusal(error: io::Error) -> ResourceError {
    if error.raw_os_error() == Some(libc::ELOOP) {
        return ResourceError::NotFound;
    }
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
        let limits = ReadLimits::new(4, Duration::from_secs(1), 1 << 20, 1 << 20);
        Root::open(
            &DirectorySettings {
                path: dir.to_owned(),
                max_file_bytes,
            },
            Arc::new(limits),
        )
        .expect("a directory")
    }

    /// The bytes of a read as text would be read.
    fn read(root: &Root, path: &Path) -> Result<Vec<u8>, ResourceError> {
        root.read(path, true, ENVELOPE_BYTES)
            .map(|(bytes, _)| bytes)
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
        assert_eq!(read(&root, &listed).expect("readable"), b"notes");

        std::fs::remove_file(&listed).expect("remove");
        std::os::unix::fs::symlink(&secret, &listed).expect("link");
        assert_eq!(root.admit(&listed), None);
        assert_eq!(read(&root, &listed), Err(ResourceError::NotFound));
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
        assert_eq!(read(&root, &listed).expect("readable"), b"inside");

        std::fs::remove_dir_all(&sub).expect("remove");
        std::os::unix::fs::symlink(outside.path(), &sub).expect("link");
        assert_eq!(read(&root, &listed), Err(ResourceError::NotFound));
    }

    #[test]
    fn a_fifo_swapped_in_is_refused_without_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = root(dir.path(), 1024);
        let listed = root.dir.join("notes.txt");
        let status = std::process::Command::new("mkfifo")
            .arg(&listed)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        // A blocking open would wait here for ever for a writer.
        assert_eq!(
            read(&root, &listed),
            Err(ResourceError::Failed("not a regular file".into()))
        );
    }

    #[test]
    fn answers_must_fit_in_a_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = ReadLimits::new(4, Duration::from_secs(1), 1 << 20, 4096);
        let root =
            Root::open(&DirectorySettings::new(dir.path()), Arc::new(limits)).expect("a directory");
        let path = root.dir.join("blob.bin");
        // 3000 bytes are 4002 in base64 with quotes: over 4096 with a 100-byte envelope.
        std::fs::write(&path, vec![0u8; 3000]).expect("write");
        assert_eq!(
            root.read(&path, false, 100).map(|(b, _)| b.len()),
            Err(ResourceError::OverMessageLimit {
                size: 3000,
                encoded: 4102,
                limit: 4096
            })
        );
        // As text it is 3000 bytes and fits (its escapes are counted once it is read).
        assert_eq!(root.read(&path, true, 100).map(|(b, _)| b.len()), Ok(3000));
    }

    #[test]
    fn the_bytes_in_flight_are_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Arc::new(ReadLimits::new(4, Duration::from_secs(1), 10, 1 << 20));
        let root =
            Root::open(&DirectorySettings::new(dir.path()), limits.clone()).expect("a directory");
        let path = root.dir.join("six.txt");
        std::fs::write(&path, "123456").expect("write");
        let held = root.read(&path, true, 0).expect("within the budget");
        assert_eq!(
            root.read(&path, true, 0).map(|(b, _)| b),
            Err(ResourceError::Busy {
                scope: BusyScope::FileBytes,
                limit: 10
            })
        );
        drop(held);
        assert!(root.read(&path, true, 0).is_ok(), "the budget came back");
        assert_eq!(limits.free_reads(), 4);
    }

    #[test]
    fn json_string_lengths_count_escapes() {
        for text in ["", "plain é", "a\"b\\c\n\t\u{1}\u{7f}"] {
            let written = serde_json::to_string(text).expect("json").len() as u64;
            assert_eq!(json_string_bytes(text), written, "{text:?}");
        }
        assert_eq!(base64_bytes(3000), 4002);
        assert_eq!(base64_bytes(1), 6);
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = root(dir.path(), 4);
        let path = root.dir.join("five.txt");
        std::fs::write(&path, "12345").expect("write");
        assert_eq!(
            read(&root, &path),
            Err(ResourceError::TooLarge { size: 5, limit: 4 })
        );
        std::fs::write(&path, "1234").expect("write");
        assert_eq!(read(&root, &path).expect("at the limit"), b"1234");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(read(&root, &path), Err(ResourceError::NotFound));
    }
}
