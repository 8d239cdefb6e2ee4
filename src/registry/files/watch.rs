//! Keeping the registry in step with the disk.
//!
//! `notify`'s recommended watcher (inotify on Linux) watches each directory recursively and
//! calls back on its own thread. The callback only hands the event to a bounded channel and
//! returns (a full channel is remembered as "rescan everything", never waited on). One
//! thread per server takes the events, lets a burst settle (editors write a file in several
//! steps: truncate, write, close, or write a temporary file and rename it over the old one)
//! and then reconciles each path it saw with the disk, whatever the events said: a path that
//! now holds a servable file is served, one that holds a directory is walked, one that is
//! gone (or became a link) takes what was served under it along. A temporary file created
//! and renamed away within the burst is never registered.
//!
//! What changed goes to the registry in one batch: files that came or went in one change
//! (one `notifications/resources/list_changed` to every session, coalesced per session),
//! new sizes of listed files as a refresh without a notification, and a
//! `notifications/resources/updated` per changed file to the sessions subscribed to it.
//! Opening or reading a file (the server's own reads included) changes nothing and is
//! ignored.

use super::Root;
use super::ServeError;
use crate::registry::{Registry, RegistryError};
use crate::resource::Resource;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A burst is over when no event came for this long.
const QUIET: Duration = Duration::from_millis(50);
/// A burst that goes on is handled after this long anyway (a long copy shows progress).
const MAX_DELAY: Duration = Duration::from_millis(500);
/// Events waiting for the reconciling thread; more means "rescan everything".
const CHANNEL_CAPACITY: usize = 4096;
/// Distinct paths remembered in one burst; more means "rescan everything".
const MAX_BATCH_PATHS: usize = 10_000;
/// How often the thread looks whether a served directory was replaced (see
/// [`ServedDir::identity`]).
const ROOT_CHECK: Duration = Duration::from_secs(1);
/// The longest wait before a replaced directory that could not be watched is tried again.
const MAX_WATCH_RETRY: Duration = Duration::from_secs(60);

/// What the watcher callback hands the reconciling thread.
enum Signal {
    Event(notify::Result<Event>),
    Stop,
}

/// The watch over the served directories; it stops when dropped (the server holds it).
pub(crate) struct DirectoryWatch {
    /// Shared with the reconciling thread, which watches a replaced directory again.
    watcher: Arc<Mutex<Option<RecommendedWatcher>>>,
    signals: Option<SyncSender<Signal>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DirectoryWatch {
    /// Watches `roots`, registers their files, and starts reconciling. The watch starts
    /// before the first scan, so a change made during the scan is not missed.
    pub(super) fn start(registry: Registry, roots: Vec<Arc<Root>>) -> Result<Self, ServeError> {
        let (signals, received) = mpsc::sync_channel(CHANNEL_CAPACITY);
        let overflowed = Arc::new(AtomicBool::new(false));
        let handler = {
            let signals = signals.clone();
            let overflowed = overflowed.clone();
            move |event: notify::Result<Event>| {
                // Opening or reading a file changes nothing, and such events never take a
                // place in the channel: a scan opens every directory it reads, and with
                // thousands of directories its own opens overflowed the channel, which made
                // a rescan, which opened them all again, without end.
                if event.as_ref().is_ok_and(|event| !matters(&event.kind)) {
                    return;
                }
                if let Err(TrySendError::Full(_)) = signals.try_send(Signal::Event(event)) {
                    overflowed.store(true, Ordering::Relaxed);
                }
            }
        };
        let watch_error = |root: &Root, error: notify::Error| {
            root.error(io::Error::other(format!("cannot watch it: {error}")))
        };
        let mut watcher = RecommendedWatcher::new(
            handler,
            notify::Config::default().with_follow_symlinks(false),
        )
        .map_err(|error| watch_error(&roots[0], error))?;
        for root in &roots {
            watcher
                .watch(&root.dir, RecursiveMode::Recursive)
                .map_err(|error| watch_error(root, error))?;
        }

        let mut served = Served {
            roots: roots
                .into_iter()
                .map(|root| ServedDir {
                    identity: identity(&root.dir),
                    unwatched: None,
                    root,
                    files: BTreeMap::new(),
                })
                .collect(),
        };
        let watcher = Arc::new(Mutex::new(Some(watcher)));
        let refused = served.apply(Batch::rescan(), &registry);
        if let Some(refused) = refused.into_iter().next() {
            return Err(ServeError::Registry(refused));
        }
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = stopping.clone();
            let watcher = watcher.clone();
            std::thread::Builder::new()
                .name("mcp-ws-files".into())
                .spawn(move || {
                    reconcile_until_stopped(
                        served, registry, received, stopping, overflowed, &watcher,
                    )
                })
                .map_err(ServeError::Io)?
        };
        Ok(Self {
            watcher,
            signals: Some(signals),
            stopping,
            thread: Some(thread),
        })
    }
}

impl Drop for DirectoryWatch {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        drop(crate::lock(&self.watcher).take());
        if let Some(signals) = self.signals.take() {
            // A full channel wakes the thread anyway, and it sees `stopping`.
            let _ = signals.try_send(Signal::Stop);
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the file watch thread panicked");
            }
        }
    }
}

/// The reconciling thread: one burst at a time, until the watch is dropped.
fn reconcile_until_stopped(
    mut served: Served,
    registry: Registry,
    signals: Receiver<Signal>,
    stopping: Arc<AtomicBool>,
    overflowed: Arc<AtomicBool>,
    watcher: &Mutex<Option<RecommendedWatcher>>,
) {
    let mut last_check = Instant::now();
    loop {
        let mut batch = Batch::default();
        // Looked at every `ROOT_CHECK`, busy or quiet.
        if last_check.elapsed() >= ROOT_CHECK {
            last_check = Instant::now();
            batch.replaced = served.watch_replaced(watcher);
        }
        if batch.replaced.is_empty() {
            match signals.recv_timeout(ROOT_CHECK.saturating_sub(last_check.elapsed())) {
                Ok(Signal::Event(event)) => batch.add(event),
                Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => continue,
            }
        }
        let first = Instant::now();
        loop {
            if stopping.load(Ordering::Relaxed) {
                return;
            }
            let left = MAX_DELAY.saturating_sub(first.elapsed());
            if left.is_zero() {
                break;
            }
            match signals.recv_timeout(QUIET.min(left)) {
                Ok(Signal::Event(event)) => batch.add(event),
                Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        if overflowed.swap(false, Ordering::Relaxed) {
            tracing::warn!("file events came faster than handled; rescanning");
            batch.rescan = true;
        }
        for refused in served.apply(batch, &registry) {
            tracing::warn!(%refused, "a file is not served");
        }
    }
}

/// Whether an event of this kind may change what is served: not an open or a read (only a
/// close after writing).
fn matters(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(access) => *access == AccessKind::Close(AccessMode::Write),
        _ => true,
    }
}

/// The paths a burst of events touched.
#[derive(Default)]
struct Batch {
    /// Each path, and whether its contents may have changed (not only its metadata); in
    /// component order, a directory just before the paths under it.
    paths: BTreeMap<PathBuf, bool>,
    /// Reconcile every directory whole, and count every file as changed: events were lost.
    rescan: bool,
    /// Served directories (by index) found replaced: reconciled whole, every file counted
    /// as changed.
    replaced: Vec<usize>,
}

impl Batch {
    fn rescan() -> Self {
        Self {
            rescan: true,
            ..Self::default()
        }
    }

    fn add(&mut self, event: notify::Result<Event>) {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "file watch error; rescanning");
                self.rescan = true;
                return;
            }
        };
        if event.need_rescan() {
            self.rescan = true;
        }
        if !matters(&event.kind) {
            return;
        }
        let contents = !matches!(event.kind, EventKind::Modify(ModifyKind::Metadata(_)));
        if self.rescan {
            return;
        }
        for path in event.paths {
            *self.paths.entry(path).or_default() |= contents;
        }
        if self.paths.len() > MAX_BATCH_PATHS {
            self.paths.clear();
            self.rescan = true;
        }
    }
}

/// What was seen of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Its metadata changed (or it appeared, or went).
    Metadata,
    /// Its contents may have changed.
    Contents,
    /// Unknown (events were lost, or the first scan): anything listed may have changed.
    Rescan,
}

/// What the served directories hold, as registered.
struct Served {
    roots: Vec<ServedDir>,
}

/// One served directory and the files it registered, with their listed sizes.
struct ServedDir {
    root: Arc<Root>,
    /// The directory watched (see [`identity`]).
    identity: Option<(u64, u64)>,
    /// When a directory that replaced it could not be watched: when to try again, and the
    /// wait before that try.
    unwatched: Option<(Instant, Duration)>,
    files: BTreeMap<PathBuf, u64>,
}

/// What one burst changes in the registry.
#[derive(Default)]
struct Change {
    removed: Vec<String>,
    /// The new resources, with their directory (by index) and path.
    added: Vec<(usize, PathBuf, Resource)>,
    /// Listed resources with a new size.
    resized: Vec<Resource>,
    /// The URIs of files whose contents changed.
    updated: Vec<String>,
}

impl Served {
    /// Reconciles what `batch` touched with the disk and tells the registry; returns the
    /// files refused because their URI is another resource's.
    fn apply(&mut self, batch: Batch, registry: &Registry) -> Vec<RegistryError> {
        let mut change = Change::default();
        // The directories this burst's walks read: each is read once a burst. (Each path
        // was walked on its own: a chain of directories, a level made or touched at a time,
        // put every level in one burst, and each level's walk went down the whole chain
        // again, quadratic in its depth.) Only a directory read counts: one whose read failed
        // is walked again on its own path, which may still be readable.
        let mut read = HashSet::new();
        for (index, served) in self.roots.iter_mut().enumerate() {
            if batch.rescan || batch.replaced.contains(&index) {
                let dir = served.root.dir.clone();
                served.reconcile(index, &dir, Seen::Rescan, &mut read, &mut change);
            }
        }
        if !batch.rescan {
            // Ordered by component, a directory comes just before the paths under it, so it
            // is walked (and its subdirectories read) before their own paths come. The files
            // under it are still reconciled, for what their own events say.
            for (path, contents) in batch.paths {
                let seen = if contents {
                    Seen::Contents
                } else {
                    Seen::Metadata
                };
                // Directories never nest, so at most one holds the path.
                if let Some((index, served)) = self
                    .roots
                    .iter_mut()
                    .enumerate()
                    .find(|(_, s)| path.starts_with(&s.root.dir))
                {
                    served.reconcile(index, &path, seen, &mut read, &mut change);
                }
            }
        }
        let added = change
            .added
            .iter()
            .map(|(_, _, resource)| resource.clone())
            .collect();
        let refused = registry.change_resources(&change.removed, added, change.resized);
        // A refused file stays unserved, so its removal never takes the other resource away.
        for error in &refused {
            let RegistryError::Duplicate { key, .. } = error else {
                continue;
            };
            if let Some((index, path, _)) = change.added.iter().find(|(_, _, r)| r.uri() == key) {
                self.roots[*index].files.remove(path);
            }
        }
        for uri in &change.updated {
            registry.resource_updated(uri);
        }
        refused
    }
}

impl Served {
    /// The served directories replaced since they were watched (by index), watched again.
    /// A watch follows the directory it was set on: after `mv dir dir.old; mv dir.new dir`
    /// (a release swapped in whole), or `rm -r dir; mkdir dir`, it watched the old one, or
    /// nothing, and what came into the new one was never served. One whose path names
    /// nothing (or no directory) waits until it does again.
    fn watch_replaced(&mut self, watcher: &Mutex<Option<RecommendedWatcher>>) -> Vec<usize> {
        let mut replaced = Vec::new();
        for (index, served) in self.roots.iter_mut().enumerate() {
            let now = identity(&served.root.dir);
            let retrying = served.unwatched.is_some();
            if now == served.identity && !retrying {
                continue;
            }
            if retrying && now == served.identity {
                // The same directory, which could not be watched: tried again, now and then.
                match served.unwatched {
                    Some((at, _)) if at > Instant::now() => continue,
                    _ => {}
                }
            } else {
                // Another directory (or none): what it holds is listed again, once.
                served.identity = now;
                served.unwatched = None;
                replaced.push(index);
                if now.is_none() {
                    // Gone: what it served goes with the reconcile of it.
                    continue;
                }
            }
            let mut watcher = crate::lock(watcher);
            let Some(watcher) = watcher.as_mut() else {
                return Vec::new();
            };
            let _ = watcher.unwatch(&served.root.dir);
            match watcher.watch(&served.root.dir, RecursiveMode::Recursive) {
                Ok(()) => {
                    served.unwatched = None;
                    tracing::info!(dir = %served.root.configured.display(), "served directory replaced; watching the new one");
                }
                Err(error) => {
                    // Tried again later, each time twice as late (at most a minute): its
                    // files are not listed again meanwhile, nor announced updated.
                    let wait = served
                        .unwatched
                        .map_or(ROOT_CHECK, |(_, wait)| (wait * 2).min(MAX_WATCH_RETRY));
                    served.unwatched = Some((Instant::now() + wait, wait));
                    if !retrying {
                        tracing::warn!(dir = %served.root.configured.display(), %error, "served directory replaced, and the new one cannot be watched; trying again");
                    }
                }
            }
        }
        replaced
    }
}

/// What tells a directory apart from one put in its place: its device and inode (`None`
/// when its path names no directory).
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino()))
}

impl ServedDir {
    /// Brings what is served at and under `path` in step with the disk. A directory in
    /// `read` (read by a walk of this burst) is not walked again; those a walk reads are
    /// added to it.
    fn reconcile(
        &mut self,
        index: usize,
        path: &Path,
        seen: Seen,
        read: &mut HashSet<PathBuf>,
        change: &mut Change,
    ) {
        match std::fs::symlink_metadata(path) {
            Ok(metadata) if metadata.is_dir() && read.contains(path) => {}
            Ok(metadata) if metadata.is_dir() => {
                let found = self.root.scan(path, read);
                let gone: Vec<PathBuf> = self
                    .under(path)
                    .filter(|p| !found.contains_key(*p))
                    .cloned()
                    .collect();
                for path in gone {
                    self.unserve(&path, change);
                }
                // A directory's own event says nothing of its files' contents.
                let seen = if seen == Seen::Rescan {
                    Seen::Rescan
                } else {
                    Seen::Metadata
                };
                for (path, size) in found {
                    self.serve(index, path, size, seen, change);
                }
            }
            Ok(metadata) if metadata.is_file() => match self.root.admit(path) {
                Some(size) => self.serve(index, path.to_owned(), size, seen, change),
                None => self.unserve(path, change),
            },
            // Gone, or now a link or a special file: nothing at or under it is served.
            _ => {
                if path == self.root.dir {
                    tracing::warn!(dir = %self.root.configured.display(), "served directory is gone");
                    // A directory made again in its place is watched anew, even one given
                    // the same inode number (file systems reuse them at once).
                    self.identity = None;
                }
                let gone: Vec<PathBuf> = self.under(path).cloned().collect();
                for path in gone {
                    self.unserve(&path, change);
                }
            }
        }
    }

    /// The served files at or under `path` (paths order by component, so they are adjacent).
    fn under<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = &'a PathBuf> {
        self.files
            .range::<Path, _>((Bound::Included(path), Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(move |p| p.starts_with(path))
    }

    fn serve(&mut self, index: usize, path: PathBuf, size: u64, seen: Seen, change: &mut Change) {
        match self.files.get_mut(&path) {
            None => {
                if let Some(resource) = self.root.resource(&path, size) {
                    self.files.insert(path.clone(), size);
                    change.added.push((index, path, resource));
                }
            }
            Some(listed) => {
                let resized = *listed != size;
                if resized {
                    *listed = size;
                    change.resized.extend(self.root.resource(&path, size));
                }
                if resized || seen != Seen::Metadata {
                    change.updated.extend(super::file_uri(&path));
                }
            }
        }
    }

    fn unserve(&mut self, path: &Path, change: &mut Change) {
        if self.files.remove(path).is_some() {
            change.removed.extend(super::file_uri(path));
        }
    }
}
