//! Files as resources (`[[resources.directories]]`), over a real socket with temporary
//! directories:
//! - every regular file under the directory, recursively, is listed with a `file://` URI of
//!   its canonical path (percent-encoded), its relative path as name, a MIME type from its
//!   extension and its size; names that are not UTF-8 are not listed;
//! - a textual file that is UTF-8 is read as text, anything else as a base64 blob; a file
//!   over `max_file_bytes` is listed but its read gets -32005 with `{uri, size, limit}`;
//! - a URI spelled with other percent escapes (RFC 3986 equivalent) reads and subscribes to
//!   its file under the listed URI; escapes that change what it names (`%2F`, `%25`) find
//!   nothing;
//! - nothing outside the directory is listed or read: `..` in a URI, a link to a file
//!   outside, a link to a directory outside (at start and when created later);
//! - a file changed on disk sends `notifications/resources/updated` to exactly the sessions
//!   subscribed to it, and nothing after they unsubscribe; reading a file is no change, nor is
//!   watching a tree of thousands of directories; a directory replaced whole or made again
//!   is watched anew; every level of a deep chain of directories touched at once does not
//!   hold up the next change; a new size is listed without a `list_changed`;
//! - a file created or deleted (alone or in a new directory) sends
//!   `notifications/resources/list_changed`, and the next `resources/list` shows it;
//! - a directory that does not exist, is not a directory or lies inside another stops the
//!   server at startup (the binary with exit code 2 and a message naming it);
//! - a listed file swapped for a FIFO (atomic rename) is refused as not a regular file,
//!   read after read (more reads than `resources.max_concurrent_reads`), and the next read
//!   of a regular file works: no read waits on the FIFO;
//! - a file whose answer would not fit in `limits.max_message_bytes` (base64 for a blob,
//!   JSON escapes for text) gets -32005 naming the setting, and no frame is over the limit;
//! - a `max_file_bytes` over `resources.max_read_bytes_in_flight` (a file that could never
//!   be read) stops the server at startup, naming both; so no single file is over the
//!   budget, and reads together over it get -32008 `fileBytes` (unit test
//!   `registry::files::read::tests::the_bytes_in_flight_are_bounded`: overlapping reads
//!   cannot be made to overlap deterministically through a socket).
//!
//! Watcher events arrive asynchronously: a test waits for the notification (the client's
//! receive timeout bounds the wait) and proves absence with a barrier after a notification
//! another session got from the same change.

use crate::support::http::wait_metric;
use crate::support::{assert_error, assert_result, settings, Client, Hold};
use base64::Engine;
use mcp_ws::config::DirectorySettings;
use mcp_ws::{RunningServer, Server, Settings, Tool};
use serde_json::{json, Value};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Semaphore;

const LIST_CHANGED: &str = "notifications/resources/list_changed";
const UPDATED: &str = "notifications/resources/updated";

/// A server with no other capability, serving `dir` with this size limit.
fn serve(dir: &Path, max_file_bytes: u64) -> RunningServer {
    serve_with(dir, max_file_bytes, settings())
}

/// [`serve`] with `settings`.
fn serve_with(dir: &Path, max_file_bytes: u64, mut settings: Settings) -> RunningServer {
    mcp_ws::telemetry::init("warn");
    settings.resources.directories.push(DirectorySettings {
        path: dir.to_owned(),
        max_file_bytes,
    });
    Server::builder()
        .settings(settings)
        .build()
        .expect("server builds")
        .spawn()
        .expect("server starts")
}

/// A temporary directory and its canonical path (URIs name canonical paths).
fn temp_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let canonical = dir.path().canonicalize().expect("canonical");
    assert!(
        canonical
            .to_str()
            .expect("UTF-8")
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b)),
        "the temp path needs no percent-encoding: {canonical:?}"
    );
    (dir, canonical)
}

/// The URI of a file whose path needs no percent-encoding.
fn uri(path: &Path) -> String {
    format!("file://{}", path.to_str().expect("UTF-8"))
}

fn write(path: &Path, contents: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, contents).expect("write");
}

async fn list(client: &mut Client) -> Vec<Value> {
    let id = client.fresh_id();
    let response = client
        .request_with_id(id.clone(), "resources/list", json!({}))
        .await;
    let result = assert_result(&response, &id);
    assert!(result.get("nextCursor").is_none(), "one page: {result}");
    result["resources"].as_array().expect("resources").clone()
}

fn uris(resources: &[Value]) -> Vec<&str> {
    resources
        .iter()
        .map(|r| r["uri"].as_str().expect("uri"))
        .collect()
}

/// The contents of a successful read of `uri`.
async fn read_ok(client: &mut Client, uri: &str) -> Value {
    let id = client.fresh_id();
    let response = client
        .request_with_id(id.clone(), "resources/read", json!({ "uri": uri }))
        .await;
    let contents = assert_result(&response, &id)["contents"].clone();
    assert_eq!(contents.as_array().map(Vec::len), Some(1), "{response}");
    contents[0].clone()
}

async fn subscribe(client: &mut Client, uri: &str) {
    let id = client.fresh_id();
    let response = client
        .request_with_id(id.clone(), "resources/subscribe", json!({ "uri": uri }))
        .await;
    assert_eq!(assert_result(&response, &id), json!({}));
}

/// The next frame, which must be the notification `method`.
async fn expect_notification(client: &mut Client, method: &str) -> Value {
    let frame = client.recv().await;
    assert_eq!(frame["method"], method, "expected {method}, got {frame}");
    assert!(frame.get("id").is_none(), "{frame}");
    frame
}

async fn expect_updated(client: &mut Client, uri: &str) {
    let frame = expect_notification(client, UPDATED).await;
    assert_eq!(frame["params"], json!({ "uri": uri }), "{frame}");
}

/// The built server's startup error, as text.
fn startup_error(directories: Vec<DirectorySettings>) -> String {
    let mut settings = settings();
    settings.resources.directories = directories;
    match Server::builder().settings(settings).build() {
        Ok(_) => panic!("the server built"),
        Err(error) => {
            assert!(
                matches!(error, mcp_ws::Error::ResourceDirectory { .. }),
                "{error:?}"
            );
            error.to_string()
        }
    }
}

#[tokio::test]
async fn list_shows_every_file_with_its_name_mime_type_and_size() {
    let (_dir, root) = temp_dir();
    write(&root.join("notes.txt"), "hello notes");
    write(&root.join("docs/guide.md"), "# Guide\n");
    write(&root.join("docs/data/config.json"), r#"{"a":1}"#);
    write(
        &root.join("image.png"),
        [0x89, b'P', b'N', b'G', 0, 1, 2, 255],
    );
    write(&root.join("big.txt"), "x".repeat(100));
    write(&root.join("with space.txt"), "spaced");
    std::fs::create_dir(root.join("empty")).expect("mkdir");
    let not_utf8 = root.join(std::ffi::OsStr::from_bytes(b"bad\xff.txt"));
    std::fs::write(&not_utf8, "hidden").expect("write");
    let server = serve(&root, 64);
    let mut client = Client::initialized(&server).await;

    let mut expected = vec![
        json!({"uri": uri(&root.join("notes.txt")), "name": "notes.txt", "mimeType": "text/plain", "size": 11}),
        json!({"uri": uri(&root.join("docs/guide.md")), "name": "docs/guide.md", "mimeType": "text/markdown", "size": 8}),
        json!({"uri": uri(&root.join("docs/data/config.json")), "name": "docs/data/config.json", "mimeType": "application/json", "size": 7}),
        json!({"uri": uri(&root.join("image.png")), "name": "image.png", "mimeType": "image/png", "size": 8}),
        json!({"uri": uri(&root.join("big.txt")), "name": "big.txt", "mimeType": "text/plain", "size": 100}),
        json!({"uri": format!("{}/with%20space.txt", uri(&root)), "name": "with space.txt", "mimeType": "text/plain", "size": 6}),
    ];
    expected.sort_by(|a, b| a["uri"].as_str().cmp(&b["uri"].as_str()));
    assert_eq!(list(&mut client).await, expected);
}

#[tokio::test]
async fn text_files_are_read_as_text_and_others_as_base64_blobs() {
    let (_dir, root) = temp_dir();
    let png = [0x89, b'P', b'N', b'G', 0, 1, 2, 255];
    write(&root.join("notes.txt"), "hello notes ✓");
    write(&root.join("data/config.json"), r#"{"a":1}"#);
    write(&root.join("image.png"), png);
    write(&root.join("latin1.txt"), b"caf\xe9");
    write(&root.join("with space.txt"), "spaced");
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;

    let notes = uri(&root.join("notes.txt"));
    assert_eq!(
        read_ok(&mut client, &notes).await,
        json!({"uri": notes, "mimeType": "text/plain", "text": "hello notes ✓"})
    );
    let config = uri(&root.join("data/config.json"));
    assert_eq!(
        read_ok(&mut client, &config).await,
        json!({"uri": config, "mimeType": "application/json", "text": r#"{"a":1}"#})
    );
    let image = uri(&root.join("image.png"));
    assert_eq!(
        read_ok(&mut client, &image).await,
        json!({"uri": image, "mimeType": "image/png",
               "blob": base64::engine::general_purpose::STANDARD.encode(png)})
    );
    // A textual type whose bytes are not UTF-8 goes as bytes.
    let latin1 = uri(&root.join("latin1.txt"));
    assert_eq!(
        read_ok(&mut client, &latin1).await,
        json!({"uri": latin1, "mimeType": "text/plain",
               "blob": base64::engine::general_purpose::STANDARD.encode(b"caf\xe9")})
    );
    let spaced = format!("{}/with%20space.txt", uri(&root));
    assert_eq!(read_ok(&mut client, &spaced).await["text"], "spaced");
}

#[tokio::test]
async fn a_file_over_the_limit_is_listed_but_its_read_gets_32005_with_data() {
    let (_dir, root) = temp_dir();
    write(&root.join("big.bin"), vec![7u8; 65]);
    write(&root.join("exact.bin"), vec![7u8; 64]);
    let server = serve(&root, 64);
    let mut client = Client::initialized(&server).await;

    let big = uri(&root.join("big.bin"));
    let listed = list(&mut client).await;
    let entry = listed.iter().find(|r| r["uri"] == big).expect("listed");
    assert_eq!(entry["size"], 65);

    let id = client.fresh_id();
    let response = client
        .request_with_id(id.clone(), "resources/read", json!({ "uri": big }))
        .await;
    let error = assert_error(&response, &id, -32005);
    assert_eq!(error["data"], json!({"uri": big, "size": 65, "limit": 64}));

    // At the limit is not over it.
    let exact = uri(&root.join("exact.bin"));
    assert_eq!(
        read_ok(&mut client, &exact).await["blob"],
        base64::engine::general_purpose::STANDARD.encode([7u8; 64])
    );
}

#[tokio::test]
async fn nothing_outside_the_directory_is_listed_or_read() {
    let (_outside_dir, outside) = temp_dir();
    write(&outside.join("secret.txt"), "secret");
    write(&outside.join("sub/inner.txt"), "inner secret");
    let (_dir, root) = temp_dir();
    write(&root.join("real.txt"), "real");
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("to_file.txt")).expect("link");
    std::os::unix::fs::symlink(outside.join("sub"), root.join("to_dir")).expect("link");
    // A link to a file inside is that file, listed once under its own path.
    std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias.txt")).expect("link");
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;

    let real = uri(&root.join("real.txt"));
    assert_eq!(uris(&list(&mut client).await), [real.as_str()]);

    let outside_name = outside.file_name().expect("name").to_str().expect("UTF-8");
    let escapes = [
        uri(&root.join("to_file.txt")),
        uri(&root.join("to_dir/inner.txt")),
        uri(&root.join("alias.txt")),
        format!("{}/../{outside_name}/secret.txt", uri(&root)),
        format!("{}/real.txt/../../{outside_name}/secret.txt", uri(&root)),
        format!("{}/%2E%2E/{outside_name}/secret.txt", uri(&root)),
        uri(&outside.join("secret.txt")),
        uri(&outside.join("sub/inner.txt")),
    ];
    for escape in &escapes {
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), "resources/read", json!({ "uri": escape }))
            .await;
        let error = assert_error(&response, &id, -32002);
        assert_eq!(error["data"], json!({ "uri": escape }), "{response}");
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), "resources/subscribe", json!({ "uri": escape }))
            .await;
        assert_error(&response, &id, -32002);
    }

    // Links made while the server runs are not listed either: the regular file made after
    // them is, and the list that announces it holds nothing else new.
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("later.txt")).expect("link");
    std::os::unix::fs::symlink(&outside, root.join("later_dir")).expect("link");
    write(&root.join("marker.txt"), "marker");
    expect_notification(&mut client, LIST_CHANGED).await;
    let marker = uri(&root.join("marker.txt"));
    assert_eq!(
        uris(&list(&mut client).await),
        [marker.as_str(), real.as_str()]
    );
    for escape in [
        uri(&root.join("later.txt")),
        uri(&root.join("later_dir/secret.txt")),
    ] {
        let response = client.read_resource(&escape).await;
        assert_eq!(response["error"]["code"], -32002, "{response}");
    }
}

#[tokio::test]
async fn a_change_on_disk_reaches_exactly_the_sessions_subscribed_to_that_file() {
    let (_dir, root) = temp_dir();
    let (changed, other) = (root.join("changed.txt"), root.join("other.txt"));
    write(&changed, "before");
    write(&other, "other");
    let server = serve(&root, 1024);
    let mut subscriber = Client::initialized(&server).await;
    let mut bystander = Client::initialized(&server).await;
    subscribe(&mut subscriber, &uri(&changed)).await;
    subscribe(&mut bystander, &uri(&other)).await;

    write(&changed, "after, and longer");
    expect_updated(&mut subscriber, &uri(&changed)).await;
    // The same change reached every session of the thread at once: anything meant for the
    // bystander would come before the answer to its ping.
    bystander.expect_nothing_pending().await;
    assert_eq!(
        read_ok(&mut subscriber, &uri(&changed)).await["text"],
        "after, and longer"
    );
}

#[tokio::test]
async fn a_uri_spelled_with_other_percent_escapes_finds_its_file_and_no_other() {
    let (_dir, root) = temp_dir();
    let (file, accented) = (root.join("a b~c.txt"), root.join("\u{e9}t\u{e9}.txt"));
    write(&file, "spaced");
    write(&accented, "accented");
    write(&root.join("sub/inner.txt"), "inner");
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;
    let base = uri(&root);
    let listed = format!("{base}/a%20b~c.txt");
    let listed_accented = format!("{base}/%C3%A9t%C3%A9.txt");
    let mut shown = uris(&list(&mut client).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    shown.sort();
    assert_eq!(
        shown,
        [
            listed_accented.clone(),
            listed.clone(),
            format!("{base}/sub/inner.txt")
        ]
    );

    // RFC 3986 equivalents: an unreserved character escaped, the hex digits in lower case.
    let spelled = format!("{base}/a%20b%7ec.txt");
    let read = read_ok(&mut client, &spelled).await;
    assert_eq!(
        (read["uri"].as_str(), read["text"].as_str()),
        (Some(&*listed), Some("spaced"))
    );
    let read = read_ok(&mut client, &format!("{base}/%c3%a9t%c3%A9.txt")).await;
    assert_eq!(read["uri"], listed_accented.as_str());

    // Escapes that would change what the URI names are not decoded: `%2F` is no `/`, and
    // `%2E%2E` decoded is a `..`, which names no listed file.
    for other in [
        format!("{base}/sub%2finner.txt"),
        format!("{base}/sub/%2E%2E/a%20b~c.txt"),
        format!("{base}/a%2520b~c.txt"),
    ] {
        let response = client
            .request("resources/read", json!({ "uri": other }))
            .await;
        assert_error(&response, &response["id"], -32002);
    }

    // A subscription by another spelling follows the file under its listed URI, and the
    // same spelling ends it (`stayer`'s notification is the barrier that proves it).
    let mut stayer = Client::initialized(&server).await;
    subscribe(&mut stayer, &listed).await;
    subscribe(&mut client, &spelled).await;
    write(&file, "changed");
    expect_updated(&mut client, &listed).await;
    expect_updated(&mut stayer, &listed).await;
    let response = client
        .request("resources/unsubscribe", json!({ "uri": spelled }))
        .await;
    assert_eq!(response["result"], json!({}), "{response}");
    client.drain_until_barrier().await;
    stayer.drain_until_barrier().await;
    write(&file, "changed again");
    expect_updated(&mut stayer, &listed).await;
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn reading_a_file_is_not_a_change() {
    let (_dir, root) = temp_dir();
    let (_staging_dir, staging) = temp_dir();
    let (read_file, changed) = (root.join("read.txt"), root.join("changed.txt"));
    write(&read_file, "read me");
    write(&changed, "before");
    let server = serve(&root, 1024);
    let mut reader = Client::initialized(&server).await;
    let mut witness = Client::initialized(&server).await;
    subscribe(&mut reader, &uri(&read_file)).await;
    subscribe(&mut witness, &uri(&changed)).await;

    for _ in 0..3 {
        assert_eq!(
            read_ok(&mut reader, &uri(&read_file)).await["text"],
            "read me"
        );
    }
    // A change made after the reads, in one step (a rename), is seen after them.
    write(&staging.join("changed.txt"), "after");
    std::fs::rename(staging.join("changed.txt"), &changed).expect("rename");
    expect_updated(&mut witness, &uri(&changed)).await;
    reader.expect_nothing_pending().await;
}

/// A tree of thousands of directories, nothing changing in it: no update, no list change.
/// (A scan opens each directory, and the watch saw each open: over 2,048 directories, one
/// scan's opens filled the watcher's queue, which made it scan again, without end, every
/// file of the tree announced updated at each round.)
#[tokio::test]
async fn a_tree_of_thousands_of_directories_is_watched_without_announcing_changes() {
    let (_dir, root) = temp_dir();
    for n in 0..2_500 {
        let dir = root.join(format!("d{n}"));
        std::fs::create_dir(&dir).expect("mkdir");
        write(&dir.join("f.txt"), "still");
    }
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;
    subscribe(&mut client, &uri(&root.join("d7").join("f.txt"))).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    client.expect_nothing_pending().await;
}

/// Every directory of a chain 800 deep touched in one burst (each its own event): a file
/// made at the top afterwards is listed within seconds. (Each directory's event walked its
/// whole subtree again, every level opened by its full path: about 20 s of one core, during
/// which no change anywhere in the served directories was noticed.)
#[tokio::test]
async fn a_deep_chain_touched_level_by_level_does_not_stall_the_watch() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, root) = temp_dir();
    let mut chain = Vec::new();
    let mut dir = root.clone();
    for _ in 0..800 {
        dir.push("dd");
        chain.push(dir.clone());
    }
    std::fs::create_dir_all(&dir).expect("mkdir -p");
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;
    for dir in &chain {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let probe = root.join("probe.txt");
    write(&probe, "here");
    // Well over a burst's delay (half a second), well under the stall.
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        expect_notification(&mut client, LIST_CHANGED),
    )
    .await
    .expect("the new file is noticed within 5 s");
    assert_eq!(uris(&list(&mut client).await), [uri(&probe).as_str()]);
}

/// A file that grows between two pages (a log file in a served directory) leaves the cursor
/// valid: its new size is no list change. (The cursor's hash covered each definition, size
/// included: the next page was refused -32602, with no `list_changed` sent.)
#[tokio::test]
async fn a_file_that_grows_between_two_pages_leaves_the_cursor_valid() {
    let (_dir, root) = temp_dir();
    for n in 1..=5 {
        write(&root.join(format!("f{n}.txt")), "short");
    }
    let mut s = settings();
    s.limits.page_size = 2;
    let server = serve_with(&root, 1024, s);
    let mut client = Client::initialized(&server).await;
    let first = client.request("resources/list", json!({})).await;
    let cursor = first["result"]["nextCursor"]
        .as_str()
        .unwrap_or_else(|| panic!("a first page of two: {first}"))
        .to_owned();
    write(&root.join("f1.txt"), "longer than it was");
    // The change is seen (the first page shows the new size) before the next page is asked.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let page = client.request("resources/list", json!({})).await;
        let grown = page["result"]["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == "f1.txt" && r["size"] == 18));
        if grown {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "f1.txt's new size never listed: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut names = Vec::new();
    let mut next = Some(cursor);
    while let Some(cursor) = next {
        let page = client
            .request("resources/list", json!({ "cursor": cursor }))
            .await;
        let result = &page["result"];
        assert!(result.is_object(), "{page}");
        names.extend(
            result["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_owned)),
        );
        next = result["nextCursor"].as_str().map(str::to_owned);
    }
    assert_eq!(names, ["f3.txt", "f4.txt", "f5.txt"]);
}

#[tokio::test]
async fn a_file_replaced_by_rename_is_updated_and_listed_with_its_new_size() {
    let (_dir, root) = temp_dir();
    let (_staging_dir, staging) = temp_dir();
    let target = root.join("doc.md");
    write(&target, "short");
    let server = serve(&root, 1024);
    let mut client = Client::initialized(&server).await;
    subscribe(&mut client, &uri(&target)).await;

    // As editors save: a whole new file renamed over the old one, in one step.
    let replacement = staging.join("doc.md.new");
    write(&replacement, "a good deal longer than before");
    std::fs::rename(&replacement, &target).expect("rename");
    expect_updated(&mut client, &uri(&target)).await;
    let listed = list(&mut client).await;
    assert_eq!(
        listed,
        [json!({"uri": uri(&target), "name": "doc.md", "mimeType": "text/markdown", "size": 30})]
    );
    // A new size is no list change.
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn after_unsubscribe_changes_send_nothing() {
    let (_dir, root) = temp_dir();
    let file = root.join("watched.txt");
    write(&file, "one");
    let server = serve(&root, 1024);
    let mut leaver = Client::initialized(&server).await;
    let mut stayer = Client::initialized(&server).await;
    subscribe(&mut leaver, &uri(&file)).await;
    subscribe(&mut stayer, &uri(&file)).await;

    write(&file, "two");
    expect_updated(&mut leaver, &uri(&file)).await;
    expect_updated(&mut stayer, &uri(&file)).await;

    let id = leaver.fresh_id();
    let response = leaver
        .request_with_id(
            id.clone(),
            "resources/unsubscribe",
            json!({ "uri": uri(&file) }),
        )
        .await;
    assert_eq!(assert_result(&response, &id), json!({}));
    // Frames the first write may still have sent (an editor-like write can come in two
    // bursts) are not about the next one.
    leaver.drain_until_barrier().await;
    stayer.drain_until_barrier().await;
    write(&file, "three");
    expect_updated(&mut stayer, &uri(&file)).await;
    leaver.expect_nothing_pending().await;
}

/// The names listed, waiting (up to 10 s) until they are `expected`.
async fn wait_listed(client: &mut Client, expected: &[&str]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listed = list(client).await;
        let mut names: Vec<&str> = listed.iter().filter_map(|r| r["name"].as_str()).collect();
        names.sort_unstable();
        if names == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "listed {names:?}, never {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A served directory replaced whole (a release swapped in: `mv dir dir.old; mv dir.new
/// dir`), or deleted and made again, is watched anew: its files are listed, and files made
/// in it later too. (The watch followed the old directory: what came into the new one was
/// never listed, and after a delete nothing ever was again.)
#[tokio::test]
async fn a_served_directory_replaced_or_made_again_is_watched_anew() {
    let (_dir, base) = temp_dir();
    let served = base.join("served");
    std::fs::create_dir(&served).expect("mkdir");
    write(&served.join("a.txt"), "one");
    let server = serve(&served, 1024);
    let mut client = Client::initialized(&server).await;
    wait_listed(&mut client, &["a.txt"]).await;

    let next = base.join("served.new");
    std::fs::create_dir(&next).expect("mkdir");
    write(&next.join("b.txt"), "two");
    std::fs::rename(&served, base.join("served.old")).expect("rename");
    std::fs::rename(&next, &served).expect("rename");
    wait_listed(&mut client, &["b.txt"]).await;
    write(&served.join("c.txt"), "three");
    wait_listed(&mut client, &["b.txt", "c.txt"]).await;

    std::fs::remove_dir_all(&served).expect("rm -r");
    wait_listed(&mut client, &[]).await;
    std::fs::create_dir(&served).expect("mkdir");
    write(&served.join("d.txt"), "four");
    wait_listed(&mut client, &["d.txt"]).await;
    write(&served.join("e.txt"), "five");
    wait_listed(&mut client, &["d.txt", "e.txt"]).await;
}

#[tokio::test]
async fn creating_and_deleting_files_sends_list_changed_and_the_list_follows() {
    let (_dir, root) = temp_dir();
    let server = serve(&root, 1024);
    // An empty directory still declares resources, with updates and list changes.
    let mut client = Client::connect(&server).await;
    let response = client
        .request_with_id(
            json!(0),
            "initialize",
            crate::support::initialize_params("2025-11-25"),
        )
        .await;
    assert_eq!(
        response["result"]["capabilities"]["resources"],
        json!({"subscribe": true, "listChanged": true}),
        "{response}"
    );
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(list(&mut client).await, Vec::<Value>::new());

    let created = root.join("new.txt");
    write(&created, "new");
    expect_notification(&mut client, LIST_CHANGED).await;
    let listed = list(&mut client).await;
    assert_eq!(uris(&listed), [uri(&created).as_str()]);
    assert_eq!(listed[0]["name"], "new.txt");
    assert_eq!(read_ok(&mut client, &uri(&created)).await["text"], "new");

    // A new directory with a file in it.
    let nested = root.join("sub/deeper/nested.md");
    write(&nested, "# nested");
    expect_notification(&mut client, LIST_CHANGED).await;
    let listed = list(&mut client).await;
    let nested_entry = listed
        .iter()
        .find(|r| r["uri"] == uri(&nested))
        .unwrap_or_else(|| panic!("nested file listed: {listed:?}"));
    assert_eq!(nested_entry["name"], "sub/deeper/nested.md");
    assert_eq!(listed.len(), 2, "{listed:?}");

    std::fs::remove_file(&created).expect("remove");
    expect_notification(&mut client, LIST_CHANGED).await;
    assert_eq!(uris(&list(&mut client).await), [uri(&nested).as_str()]);
    let response = client.read_resource(&uri(&created)).await;
    assert_eq!(response["error"]["code"], -32002, "{response}");

    std::fs::remove_dir_all(root.join("sub")).expect("remove");
    expect_notification(&mut client, LIST_CHANGED).await;
    assert_eq!(list(&mut client).await, Vec::<Value>::new());
}

#[test]
fn a_missing_directory_or_a_file_stops_the_server_at_startup() {
    let (_dir, root) = temp_dir();
    let missing = root.join("missing");
    let message = startup_error(vec![DirectorySettings::new(&missing)]);
    assert!(
        message.contains(missing.to_str().expect("UTF-8")) && message.contains("No such file"),
        "{message}"
    );

    let file = root.join("file.txt");
    write(&file, "not a directory");
    let message = startup_error(vec![DirectorySettings::new(&file)]);
    assert!(
        message.contains(file.to_str().expect("UTF-8")) && message.contains("not a directory"),
        "{message}"
    );

    // One directory inside another would serve the same files twice.
    std::fs::create_dir(root.join("inner")).expect("mkdir");
    let message = startup_error(vec![
        DirectorySettings::new(&root),
        DirectorySettings::new(root.join("inner")),
    ]);
    assert!(message.contains("lies inside"), "{message}");
}

#[test]
fn the_binary_refuses_a_missing_directory_with_exit_code_2() {
    let (_dir, root) = temp_dir();
    let missing = root.join("missing");
    let config = root.join("config.toml");
    write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[[resources.directories]]\npath = {:?}\n",
            missing.to_str().expect("UTF-8")
        ),
    );
    let mut process = crate::support::process::ServerProcess::spawn(
        &["--config", config.to_str().expect("UTF-8")],
        &[],
    );
    let (status, stderr) = process.wait_exit();
    assert_eq!(status.code(), Some(2), "{status:?}; stderr:\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "resources.directories: cannot serve {}",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// Hostile files.

#[tokio::test]
async fn a_listed_file_swapped_for_a_fifo_is_refused_and_reads_go_on() {
    let (_dir, root) = temp_dir();
    write(&root.join("notes.txt"), "notes");
    write(&root.join("other.txt"), "other");
    let mut s = settings();
    s.resources.directories.push(DirectorySettings::new(&root));
    s.resources.max_concurrent_reads = 2;
    // One worker slot: the reads wait for it behind `hold` until the FIFO is in place.
    s.limits.max_concurrent_requests = 1;
    s.limits.admission_wait_ms = 60_000;
    let gate = Arc::new(Semaphore::new(0));
    let hold = Tool::from_handler(
        "hold",
        "Waits until the test opens the gate.",
        json!({"type": "object"}),
        Hold(gate.clone()),
    );
    mcp_ws::telemetry::init("warn");
    let server = Server::builder()
        .settings(s)
        .tool(hold)
        .build()
        .expect("server builds")
        .spawn()
        .expect("server starts");
    let mut client = Client::initialized(&server).await;
    let notes = uri(&root.join("notes.txt"));

    client
        .send_json(json!({"jsonrpc":"2.0","id":"hold","method":"tools/call",
            "params":{"name":"hold","arguments":{}}}))
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    // More reads than there are read slots, each resolved to the listed file now.
    let reads = 5;
    for n in 0..reads {
        client
            .send_json(json!({"jsonrpc":"2.0","id":n,"method":"resources/read",
                "params":{"uri": notes}}))
            .await;
    }
    wait_metric(&server, "mcp_workers", 1 + reads).await;
    // The listed name now holds a FIFO (an atomic rename, as an attacker would).
    let fifo = root.join("fifo.tmp");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    std::fs::rename(&fifo, root.join("notes.txt")).expect("rename");
    expect_notification(&mut client, LIST_CHANGED).await;

    gate.add_permits(1);
    let held = client.recv_response(&json!("hold")).await;
    assert_result(&held, &json!("hold"));
    for n in 0..reads {
        let response = client.recv_response(&json!(n)).await;
        let error = assert_error(&response, &json!(n), -32006);
        assert_eq!(error["message"], "not a regular file", "{response}");
    }
    // No thread waits on the FIFO: the next read of a regular file works.
    let other = uri(&root.join("other.txt"));
    assert_eq!(read_ok(&mut client, &other).await["text"], "other");
}

#[tokio::test]
async fn a_file_whose_answer_would_not_fit_in_a_message_is_refused_naming_the_limit() {
    let (_dir, root) = temp_dir();
    let limit = 64 * 1024;
    // 48 KiB of bytes are 64 KiB of base64: over, with the answer around it.
    write(&root.join("over.bin"), vec![1u8; 48 * 1024]);
    // 40 KiB of quotes are 80 KiB of JSON text: over once escaped.
    write(&root.join("quotes.txt"), "\"".repeat(40 * 1024));
    // 40 KiB of bytes are 54 KiB of base64: it fits.
    write(&root.join("fits.bin"), vec![2u8; 40 * 1024]);
    let mut s = settings();
    s.limits.max_message_bytes = limit;
    let server = serve_with(&root, 1024 * 1024, s);
    let mut client = Client::initialized(&server).await;

    for (name, size) in [("over.bin", 48 * 1024), ("quotes.txt", 40 * 1024)] {
        let file = uri(&root.join(name));
        client
            .send_json(json!({"jsonrpc":"2.0","id":name,"method":"resources/read",
                "params":{"uri": file}}))
            .await;
        let frame = client.recv_text().await;
        assert!(
            frame.len() <= limit,
            "{name}: a frame of {} bytes",
            frame.len()
        );
        let response: Value = serde_json::from_str(&frame).expect("JSON");
        let error = assert_error(&response, &json!(name), -32005);
        assert_eq!(error["data"]["setting"], "limits.max_message_bytes");
        assert_eq!(error["data"]["limit"], limit);
        assert_eq!(error["data"]["size"], size);
        assert!(
            error["data"]["encodedSize"].as_u64().expect("encodedSize") > limit as u64,
            "{error}"
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("limits.max_message_bytes")),
            "{error}"
        );
    }
    let fits = uri(&root.join("fits.bin"));
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":"fits","method":"resources/read",
            "params":{"uri": fits}}),
        )
        .await;
    let frame = client.recv_text().await;
    assert!(frame.len() <= limit, "a frame of {} bytes", frame.len());
    let response: Value = serde_json::from_str(&frame).expect("JSON");
    assert_eq!(
        assert_result(&response, &json!("fits"))["contents"][0]["blob"],
        base64::engine::general_purpose::STANDARD.encode(vec![2u8; 40 * 1024])
    );
}

#[test]
fn a_file_limit_over_the_read_budget_stops_the_server_at_startup() {
    let (_dir, root) = temp_dir();
    let mut s = settings();
    s.resources.max_read_bytes_in_flight = 10;
    s.resources.directories.push(DirectorySettings {
        path: root.clone(),
        max_file_bytes: 11,
    });
    let refused = Server::builder()
        .settings(s.clone())
        .build()
        .err()
        .map(|error| error.to_string())
        .expect("refused");
    assert!(
        refused.contains("exceeds resources.max_read_bytes_in_flight (10)")
            && refused.contains("max_file_bytes of")
            && refused.contains("(11)"),
        "{refused}"
    );
    // At the budget it starts.
    s.resources.directories[0].max_file_bytes = 10;
    let server = Server::builder()
        .settings(s)
        .build()
        .expect("a file of the whole budget can be read")
        .spawn()
        .expect("server starts");
    server.stop();
}
