//! The layer rule of the crate, held as a test: every `crate::` path in `src/` names a module
//! of the same layer or of one below it (the order is [`LAYERS`], the one `lib.rs` documents),
//! and no module reaches itself again through such paths.
//!
//! Paths are read as text, after comments are cut, so a doc link may point anywhere; a name
//! re-exported at the root (`crate::Tool`) counts as the module it comes from, read from
//! `lib.rs`'s `pub use` lines. `super::` paths count too (a sibling's or the parent's items),
//! except in a file's own `mod tests`, whose `super` is the file itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top to bottom, each with the files and folders (relative to `src/`) it holds.
const LAYERS: &[(&str, &[&str])] = &[
    ("server", &["server/"]),
    ("gateway", &["gateway/"]),
    ("transport", &["transport/"]),
    ("session", &["session/"]),
    ("perimeter", &["perimeter/"]),
    ("cluster", &["cluster/"]),
    ("worker", &["worker/"]),
    ("registry", &["registry/"]),
    (
        "public API",
        &[
            "tool.rs",
            "resource.rs",
            "prompt.rs",
            "context.rs",
            "context/",
            "model/",
            "schema.rs",
        ],
    ),
    ("mailbox", &["mailbox/"]),
    ("observe", &["observe/"]),
    ("config", &["config/"]),
    ("client", &["client/"]),
    ("protocol", &["protocol/"]),
];

/// Files outside the layers: the crate root declares every module and holds the helpers
/// every layer may use (`lock`, `FastHash`, `random_id`); this file only reads the others;
/// `testing.rs` is the tests' door into every layer (the `testing` feature);
/// the binary (`main.rs`, `allocator.rs`, `demo/`, `conformance/`) uses the library from outside, through its public API.
const OUTSIDE: &[&str] = &[
    "lib.rs",
    "layers.rs",
    "testing.rs",
    "main.rs",
    "allocator.rs",
    "demo/",
    "conformance/",
];

fn is_outside(file: &str) -> bool {
    OUTSIDE.iter().any(|place| {
        if place.ends_with('/') {
            file.starts_with(place)
        } else {
            file == *place
        }
    })
}

fn layer_of(file: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, places)| {
        places.iter().any(|place| {
            if place.ends_with('/') {
                file.starts_with(place)
            } else {
                file == *place
            }
        })
    })
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `text` without its comments (`//` to the end of the line, `/* … */`), string literals kept
/// as they are except that a `//` inside one does not start a comment.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for skipped in chars.by_ref() {
                    if skipped == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for skipped in chars.by_ref() {
                    if last == '*' && skipped == '/' {
                        break;
                    }
                    last = skipped;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every path after `crate::` in `code`, as its segments: `crate::a::b::C` gives
/// `[a, b, C]`, and `crate::{a::B, c}` gives `[a, B]` and `[c]`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        paths.extend(expand(rest, Vec::new()));
    }
    paths
}

/// The paths written at the start of `text` (after a `::`), each prefixed with `prefix`.
fn expand(text: &str, prefix: Vec<String>) -> Vec<Vec<String>> {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0;
        let mut end = group.len();
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        let group = &group[..end];
        let mut items = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&group[start..]);
        return items
            .into_iter()
            .filter(|item| !item.trim().is_empty())
            .flat_map(|item| expand(item, prefix.clone()))
            .collect();
    }
    let ident: String = text
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() || ident == "self" {
        return if prefix.is_empty() {
            Vec::new()
        } else {
            vec![prefix]
        };
    }
    let mut path = prefix;
    path.push(ident.clone());
    match text[ident.len()..].strip_prefix("::") {
        Some(more) => expand(more, path),
        None => vec![path],
    }
}

/// The `super::` paths of the file `file` (relative to `src/`), outside its `mod tests`,
/// as paths from the crate root.
fn super_paths(file: &str, code: &str) -> Vec<Vec<String>> {
    let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or(code);
    let module: Vec<String> = file
        .trim_end_matches(".rs")
        .trim_end_matches("/mod")
        .split('/')
        .map(str::to_owned)
        .collect();
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        rest = &rest[at + "super::".len()..];
        if preceded_by_ident {
            continue;
        }
        let mut base = module.clone();
        base.pop();
        while let Some(more) = rest.strip_prefix("super::") {
            base.pop();
            rest = more;
        }
        paths.extend(expand(rest, base));
    }
    paths
}

/// What `lib.rs` re-exports at the root: name → the path it comes from.
fn root_exports(lib: &str) -> BTreeMap<String, Vec<String>> {
    let mut exports = BTreeMap::new();
    for statement in without_comments(lib).split(';') {
        let statement = statement.trim();
        let Some(path) = statement.strip_prefix("pub use ") else {
            continue;
        };
        for segments in expand(path, Vec::new()) {
            if let Some(last) = segments.last() {
                exports.insert(last.clone(), segments);
            }
        }
    }
    exports
}

/// The file (relative to `src/`) that `segments` lead to: the longest prefix that is a
/// module file. `None` for an item of the crate root itself.
fn file_of(segments: &[String]) -> Option<String> {
    let root = src();
    for len in (1..=segments.len()).rev() {
        let base = segments[..len].join("/");
        for candidate in [format!("{base}.rs"), format!("{base}/mod.rs")] {
            if root.join(&candidate).is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Every file's `crate::` imports, resolved to files (relative to `src/`).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = src();
    let lib = std::fs::read_to_string(root.join("lib.rs")).expect("lib.rs");
    let exports = root_exports(&lib);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut graph = BTreeMap::new();
    for path in files {
        let name = path
            .strip_prefix(&root)
            .expect("under src/")
            .to_string_lossy()
            .replace('\\', "/");
        if is_outside(&name) {
            continue;
        }
        let code = without_comments(&std::fs::read_to_string(&path).expect("readable"));
        let mut targets = BTreeSet::new();
        let mut paths = crate_paths(&code);
        paths.extend(super_paths(&name, &code));
        for segments in paths {
            let segments = match exports.get(&segments[0]) {
                Some(origin) => origin.clone(),
                None => segments,
            };
            if let Some(target) = file_of(&segments) {
                if target != name {
                    targets.insert(target);
                }
            }
        }
        graph.insert(name, targets);
    }
    graph
}

#[test]
fn every_file_is_in_one_layer() {
    let unplaced: Vec<_> = imports()
        .into_keys()
        .filter(|file| layer_of(file).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "files in no layer (add them to LAYERS): {unplaced:?}"
    );
}

#[test]
fn layers_import_only_downward() {
    let mut upward = Vec::new();
    for (file, targets) in imports() {
        let Some(layer) = layer_of(&file) else {
            continue;
        };
        for target in targets {
            if let Some(target_layer) = layer_of(&target) {
                if target_layer < layer {
                    upward.push(format!(
                        "{file} ({}) -> {target} ({})",
                        LAYERS[layer].0, LAYERS[target_layer].0
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "{} imports run up the layers:\n{}",
        upward.len(),
        upward.join("\n")
    );
}

#[test]
fn no_module_reaches_itself_through_its_imports() {
    let graph = imports();
    let mut cycles = Vec::new();
    for start in graph.keys() {
        // A path back to `start`, by breadth-first search from its imports.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut frontier: Vec<&str> = vec![start];
        let mut found = None;
        while found.is_none() && !frontier.is_empty() {
            let mut next = Vec::new();
            for file in frontier {
                for target in graph.get(file).into_iter().flatten() {
                    if target == start {
                        found = Some(file);
                        break;
                    }
                    if !came_from.contains_key(target.as_str()) {
                        came_from.insert(target, file);
                        next.push(target.as_str());
                    }
                }
                if found.is_some() {
                    break;
                }
            }
            frontier = next;
        }
        if let Some(mut file) = found {
            let mut cycle = vec![start.as_str()];
            let mut back = vec![file];
            while file != start.as_str() {
                match came_from.get(file) {
                    Some(previous) => {
                        file = previous;
                        back.push(file);
                    }
                    None => break,
                }
            }
            back.pop();
            back.reverse();
            cycle.extend(back);
            cycle.push(start.as_str());
            cycles.push(cycle.join(" -> "));
        }
    }
    assert!(
        cycles.is_empty(),
        "modules that import themselves through others:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_nested_and_root_paths() {
    let code = "use crate::{a::B, c::{d, e::F}};\nlet x = crate::g::h(1); // crate::ignored\n";
    let paths = crate_paths(&without_comments(code));
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["a::B", "c::d", "c::e::F", "g::h"]);
    let exports = root_exports("pub use server::{Server, ServerBuilder};\npub use tool::Tool;");
    assert_eq!(exports["ServerBuilder"], ["server", "ServerBuilder"]);
    assert_eq!(exports["Tool"], ["tool", "Tool"]);
    let siblings = super_paths("a/b.rs", "use super::c::D;\nuse super::super::e;");
    let joined: Vec<String> = siblings.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["a::c::D", "e"]);
}
