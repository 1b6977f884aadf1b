//! The layering rule, checked: a module imports only from its own layer or the layers
//! below it, the pipelines never import one another, and no two files import each other,
//! however far round (the import graph between files has no cycle).
//!
//! ```text
//! 5 facade      lib.rs (re-exports), ralph, board, mock
//! 4 pipelines   construct | specs | thread
//! 3 runtime     runtime, steer (what writes the inbox a run reads: every pipeline
//!               hands out its handle)
//! 2 agents      the crate ralph-loop-agents (crates/agents): the agents, in `agent`
//!   seams       the crate ralph-loop-core (crates/core): agent, gate, store, prioritize,
//!               the data they exchange, config, git, signal (the marker parser)
//! 1 foundation  the crate ralph-loop-process (crates/process: process, files, time,
//!               output, logfile)
//!
//! Cargo keeps the two crates below from importing anything of this one; what is left to
//! check here is the library's own layers and files.
//! ```
//!
//! The cycle rule holds for the `ralph` command too (`src/bin/ralph/`, a crate of its own,
//! above every layer: it uses the public API).
//!
//! Read from the sources: every `crate::…` path, and every `super::…` path resolved against
//! the file's own module, grouped imports (`use crate::a::{b::C, D}`) included. Comments
//! and the items under `#[cfg(test)]` are left out: tests may use anything. A file that is
//! a test module (`#[cfg(test)] mod props;`) is left out whole.
//!
//! An edge of the file graph is such a path, resolved to the file that defines the module
//! it names. A folder's `mod.rs` declaring and re-exporting its children (`mod shell; pub
//! use shell::ShellGate;`) is not an edge: that is how Rust builds a folder, and a child may
//! use what its `mod.rs` defines.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// The layer of a top-level module, by name; `None` for a name that is not a module.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "" | "ralph" | "board" | "mock" => 5,
        "construct" | "specs" | "thread" => 4,
        "runtime" | "steer" => 3,
        "agent" | "gate" | "store" | "prioritize" | "model" | "answer" | "prompt" | "event"
        | "outcome" | "context" => 2,
        "config" | "process" | "files" | "time" | "git" | "signal" | "output" | "logfile" => 1,
        _ => return None,
    })
}

const PIPELINES: [&str; 3] = ["construct", "specs", "thread"];

/// One source file of the library, as the rules read it.
struct SourceFile {
    /// The path relative to `src/`, with `/` (`agent/mod.rs`): how the failures name it.
    name: String,
    /// Its module path: `src/a/b.rs` → `[a, b]`, `src/a/mod.rs` → `[a]`.
    module: Vec<String>,
    /// Its text with comments and test items blanked, line numbers kept.
    code: String,
}

impl SourceFile {
    fn top(&self) -> &str {
        self.module.first().map_or("", String::as_str)
    }

    /// The text of line `n` (0-based) as written, for a failure message.
    fn line(&self, n: usize) -> &str {
        self.code.lines().nth(n).unwrap_or("").trim()
    }
}

/// A path the file writes: where it starts (0-based line) and its segments from the crate
/// root (`super::` resolved).
struct Use {
    line: usize,
    path: Vec<String>,
}

/// A crate of this package: the folder its module tree starts in, and its root file there.
struct Crate {
    dir: &'static str,
    root: &'static str,
    /// The modules it uses from the crates below it, under their own names.
    below: &'static [(&'static str, &'static str)],
}

/// The library: `src/bin/` holds other crates.
const LIBRARY: Crate = Crate {
    dir: "src",
    root: "lib.rs",
    below: &BELOW,
};
/// The seams and the data: a crate of its own below the library.
const CORE: Crate = Crate {
    dir: "crates/core/src",
    root: "lib.rs",
    below: BELOW.split_at(6).0.split_at(1).1,
};
/// The agents: a crate of its own between the seams and the library. Its `agent` module is
/// core's with the agents added, so `crate::agent` is its own.
const AGENTS: Crate = Crate {
    dir: "crates/agents/src",
    root: "lib.rs",
    below: BELOW.split_at(1).1,
};
/// The `ralph` command.
const COMMAND: Crate = Crate {
    dir: "src/bin/ralph",
    root: "main.rs",
    below: &[],
};

impl Crate {
    fn dir(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(self.dir)
    }
}

/// Every source of `krate`, except this file, the library's `bin/` (other crates) and the
/// files that are test modules.
fn sources(krate: &Crate) -> Vec<SourceFile> {
    let src = krate.dir();
    let src = src.as_path();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut tests = BTreeSet::new();
    let mut sources = Vec::new();
    for file in files {
        let name = name_of(src, &file);
        if name == "layers.rs" || (krate.dir == LIBRARY.dir && name.starts_with("bin/")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let (code, test_modules) = blank_tests(&strip_comments(&text));
        tests.extend(
            test_modules
                .iter()
                .map(|m| name_of(src, &child_file(&file, m))),
        );
        let module = module_of(&name);
        sources.push(SourceFile { name, module, code });
    }
    sources.retain(|s| !tests.contains(&s.name));
    sources
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn name_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The module path of a file named relative to `src/`.
fn module_of(name: &str) -> Vec<String> {
    let mut parts: Vec<String> = name
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file of a child module declared in `parent`: its `#[path]` if it has one (relative to
/// the parent's folder), else `name.rs` beside a `mod.rs`, or in the folder named after any
/// other file.
fn child_file(parent: &Path, child: &TestModule) -> PathBuf {
    let dir = parent.parent().unwrap_or(Path::new(""));
    if let Some(path) = &child.path {
        return dir.join(path);
    }
    let stem = parent.file_stem().unwrap_or_default();
    let dir = if stem == "mod" || stem == "lib" {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let file = dir.join(format!("{}.rs", child.name));
    if file.exists() {
        file
    } else {
        dir.join(&child.name).join("mod.rs")
    }
}

/// The length of the string, raw string or character literal starting at `at`, if one does.
/// Comments and test items are found outside literals only (a `"//"` is not a comment).
fn literal_len(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = &bytes[at..];
    if rest.first() == Some(&b'"') {
        let mut i = 1;
        while i < rest.len() && rest[i] != b'"' {
            i += if rest[i] == b'\\' { 2 } else { 1 };
        }
        return Some((i + 1).min(rest.len()));
    }
    if rest.first() == Some(&b'r') && (at == 0 || !is_ident(bytes[at - 1])) {
        let hashes = rest[1..].iter().take_while(|&&b| b == b'#').count();
        if rest.get(1 + hashes) == Some(&b'"') {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice());
            return Some(end.map_or(rest.len(), |e| body + e + close.len()));
        }
    }
    // A character literal: `'x'` or `'\n'`; a lifetime (`'a`) has no closing quote there.
    if rest.first() == Some(&b'\'') {
        let len = if rest.get(1) == Some(&b'\\') {
            rest.iter().skip(2).position(|&b| b == b'\'').map(|p| p + 3)
        } else {
            let ch = std::str::from_utf8(&rest[1..])
                .ok()
                .and_then(|s| s.chars().next());
            ch.map(|c| 1 + c.len_utf8())
                .filter(|&n| rest.get(n) == Some(&b'\''))
                .map(|n| n + 1)
        };
        return len;
    }
    None
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `text` with its comments replaced by spaces (newlines kept, so line numbers stay).
fn strip_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(len) = literal_len(bytes, i) {
            i += len;
        } else if bytes[i..].starts_with(b"//") {
            let end = bytes[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if bytes[i..].starts_with(b"/*") {
            let end = block_comment_end(bytes, i);
            blank(&mut out, i, end);
            i = end;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Where the block comment starting at `at` ends; block comments nest.
fn block_comment_end(bytes: &[u8], at: usize) -> usize {
    let (mut depth, mut i) = (0, at);
    while i < bytes.len() {
        if bytes[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if bytes[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    bytes.len()
}

/// Replaces `out[from..to]` with spaces, keeping newlines; multi-byte characters become
/// spaces byte by byte, which keeps the text valid UTF-8.
fn blank(out: &mut [u8], from: usize, to: usize) {
    for b in &mut out[from..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// A child module declared under `#[cfg(test)]` without a body: a file of tests.
struct TestModule {
    name: String,
    path: Option<String>,
}

const CFG_TEST: &str = "#[cfg(test)]";

/// `code` (comments already blanked) with every item under `#[cfg(test)]` blanked, and the
/// test modules it declares as files.
fn blank_tests(code: &str) -> (String, Vec<TestModule>) {
    let bytes = code.as_bytes();
    let mut out = bytes.to_vec();
    let mut modules = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(len) = literal_len(bytes, i) {
            i += len;
        } else if bytes[i..].starts_with(CFG_TEST.as_bytes()) {
            let end = item_end(bytes, i + CFG_TEST.len());
            modules.extend(test_module(&code[i..end]));
            blank(&mut out, i, end);
            i = end;
        } else {
            i += 1;
        }
    }
    (String::from_utf8(out).unwrap(), modules)
}

/// Where the item starting at `at` ends (its other attributes included): at its `;` when
/// that comes before any `{`, else at the brace that closes its first `{`.
fn item_end(bytes: &[u8], at: usize) -> usize {
    let (mut depth, mut i) = (0usize, at);
    while i < bytes.len() {
        if let Some(len) = literal_len(bytes, i) {
            i += len;
            continue;
        }
        match bytes[i] {
            // Brackets of attributes (`#[path = "x.rs"]`) and parentheses are nested too.
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && bytes[i] == b'}' {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// `mod name;` (after its attributes, a `#[path = "…"]` among them), if `item` is one.
fn test_module(item: &str) -> Option<TestModule> {
    let item = item.trim_start_matches(CFG_TEST).trim();
    let decl = item.rsplit(']').next().unwrap_or(item).trim();
    let name = decl.strip_prefix("pub(crate) ").unwrap_or(decl);
    let name = name
        .strip_prefix("mod ")?
        .strip_suffix(';')?
        .trim()
        .to_owned();
    let path = item
        .split("#[path = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned);
    Some(TestModule { name, path })
}

/// Every path in `code` that starts with `crate::` or `super::`, from the crate root.
fn uses(module: &[String], code: &str) -> Vec<Use> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        // Only a path's first segment: skip `foo::crate::` (never written) and `super::super`.
        if at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b':') {
            continue;
        }
        let mut rest = &code[at..];
        let base = if let Some(tail) = rest.strip_prefix("crate::") {
            rest = tail;
            Vec::new()
        } else {
            let mut base = module.to_vec();
            while let Some(tail) = rest.strip_prefix("super::") {
                base.pop();
                rest = tail;
            }
            base
        };
        let line = code[..at].matches('\n').count();
        let mut paths = Vec::new();
        tree(&mut Cursor(rest), base, &mut paths);
        found.extend(paths.into_iter().map(|path| Use { line, path }));
    }
    found
}

/// A position in a path being read.
struct Cursor<'a>(&'a str);

impl Cursor<'_> {
    fn skip_space(&mut self) {
        self.0 = self.0.trim_start();
    }

    fn eat(&mut self, token: &str) -> bool {
        match self.0.strip_prefix(token) {
            Some(rest) => {
                self.0 = rest;
                true
            }
            None => false,
        }
    }

    fn ident(&mut self) -> &str {
        let len = self.0.bytes().take_while(|&b| is_ident(b)).count();
        let (ident, rest) = self.0.split_at(len);
        self.0 = rest;
        ident
    }
}

/// Reads one use tree after `prefix::` (a path, or a `{…}` group of trees) into `out`.
fn tree(cursor: &mut Cursor<'_>, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    if cursor.eat("{") {
        loop {
            cursor.skip_space();
            if cursor.0.is_empty() || cursor.eat("}") {
                return;
            }
            let before = cursor.0.len();
            tree(cursor, prefix.clone(), out);
            cursor.skip_space();
            if !cursor.eat(",") && cursor.0.len() == before {
                // Something no path is made of (a `*`): step over it.
                let mut chars = cursor.0.chars();
                chars.next();
                cursor.0 = chars.as_str();
            }
        }
    }
    let mut path = prefix;
    loop {
        match cursor.ident() {
            // `*`, `<T>`, or the end of the path.
            "" => break,
            // `{self, …}` names the module itself.
            "self" => {}
            ident => path.push(ident.to_owned()),
        }
        if !cursor.eat("::") {
            break;
        }
        if cursor.0.starts_with('{') {
            return tree(cursor, path, out);
        }
    }
    // Skip the rest of this tree's item: `as name`.
    cursor.skip_space();
    if cursor.eat("as ") {
        cursor.skip_space();
        cursor.ident();
    }
    out.push(path);
}

/// The modules of the crates below the library (`crates/process`, `ralph-loop-process`;
/// `crates/core`, `ralph-loop-core`; `crates/agents`, `ralph-loop-agents`), which it uses
/// under their own names (`crate::process::…`, `crate::agent::…`): cargo keeps them from
/// importing the library. `agent` first, then the process modules, then core's.
const BELOW: [(&str, &str); 18] = [
    ("agent", "ralph_loop_agents"),
    ("files", "ralph_loop_process"),
    ("logfile", "ralph_loop_process"),
    ("output", "ralph_loop_process"),
    ("process", "ralph_loop_process"),
    ("time", "ralph_loop_process"),
    ("answer", "ralph_loop_core"),
    ("config", "ralph_loop_core"),
    ("context", "ralph_loop_core"),
    ("event", "ralph_loop_core"),
    ("gate", "ralph_loop_core"),
    ("git", "ralph_loop_core"),
    ("model", "ralph_loop_core"),
    ("outcome", "ralph_loop_core"),
    ("prioritize", "ralph_loop_core"),
    ("prompt", "ralph_loop_core"),
    ("signal", "ralph_loop_core"),
    ("store", "ralph_loop_core"),
];

/// The file that defines the module `path` names, or one of its ancestors: the longest
/// prefix of the path that is a file (`agent::claude::ClaudeCli` → `agent/claude/mod.rs`),
/// the root file (`lib.rs`) for an item of the crate root.
fn file_of(krate: &Crate, path: &[String]) -> String {
    if let Some(first) = path.first()
        && let Some((_, below)) = krate.below.iter().find(|(module, _)| module == first)
    {
        // A crate of its own, which cannot import this one: no cycle runs through it.
        return format!("{below}::{first}");
    }
    let src = krate.dir();
    for n in (1..=path.len()).rev() {
        let module = src.join(path[..n].join("/"));
        for file in [module.with_extension("rs"), module.join("mod.rs")] {
            if file.is_file() {
                return name_of(&src, &file);
            }
        }
    }
    krate.root.to_owned()
}

#[test]
fn no_module_imports_a_layer_above_it_or_a_sibling_pipeline() {
    let mut wrong = Vec::new();
    for source in [LIBRARY, CORE, AGENTS].iter().flat_map(sources) {
        let own = source.top();
        let Some(own_layer) = layer(own) else {
            panic!(
                "src/{} is in no layer: add its module to `layer`",
                source.name
            );
        };
        for Use { line, path } in uses(&source.module, &source.code) {
            let target = path.first().map_or("", String::as_str);
            // An item of the crate root (`crate::Ralph`) is a facade re-export.
            let target = if target.starts_with(char::is_uppercase) {
                ""
            } else {
                target
            };
            let Some(target_layer) = layer(target) else {
                continue;
            };
            let sideways = target != own && PIPELINES.contains(&target) && PIPELINES.contains(&own);
            if target_layer > own_layer || sideways {
                let shown = if target.is_empty() {
                    "the facade"
                } else {
                    target
                };
                wrong.push(format!(
                    "{}:{}: {own} (layer {own_layer}) uses {shown} (layer {target_layer}): {}",
                    source.name,
                    line + 1,
                    source.line(line)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// An edge of the file graph, with the line that makes it (for the failure message).
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// The file graph of `krate`: file → the files it uses, each with its first line that does.
fn file_graph(krate: &Crate) -> Edges {
    let mut edges = Edges::new();
    for source in sources(krate) {
        let out = edges.entry(source.name.clone()).or_default();
        for Use { line, path } in uses(&source.module, &source.code) {
            let target = file_of(krate, &path);
            if target != source.name {
                let said = format!("{}:{}: {}", source.name, line + 1, source.line(line));
                out.entry(target).or_insert(said);
            }
        }
    }
    edges
}

/// The shortest cycle through `start` over files that sort after it, if there is one: each
/// cycle is found once, from its first file. Breadth first, so the cycle named is short.
fn cycle_through(start: &str, edges: &Edges) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(file) = queue.pop_front() {
        for next in edges.get(file).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut cycle = vec![file.to_owned()];
                while let Some(&prev) = came_from.get(cycle.last().unwrap().as_str()) {
                    cycle.push(prev.to_owned());
                }
                cycle.reverse();
                return Some(cycle);
            }
            if next.as_str() > start && !came_from.contains_key(next.as_str()) {
                came_from.insert(next, file);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Each cycle, said edge by edge with the line that makes it.
fn cycles(edges: &Edges) -> Vec<String> {
    let mut said = Vec::new();
    for start in edges.keys() {
        let Some(cycle) = cycle_through(start, edges) else {
            continue;
        };
        let mut text = format!("{} → {start}:", cycle.join(" → "));
        for (i, file) in cycle.iter().enumerate() {
            let next = cycle.get(i + 1).unwrap_or(start);
            text.push_str(&format!("\n    {}", edges[file][next]));
        }
        said.push(text);
    }
    said
}

#[test]
fn no_files_import_each_other() {
    let mut found = Vec::new();
    for krate in [LIBRARY, CORE, AGENTS, COMMAND] {
        let graph = file_graph(&krate);
        // A reader that found no path at all would pass any crate.
        assert!(
            graph.values().any(|uses| !uses.is_empty()),
            "no imports read in {}",
            krate.dir
        );
        found.extend(
            cycles(&graph)
                .into_iter()
                .map(|c| format!("in {}: {c}", krate.dir)),
        );
    }
    assert!(
        found.is_empty(),
        "import cycles between files:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_checker_sees_upward_and_sideways_paths() {
    let thread = vec!["thread".to_owned(), "running".to_owned()];
    let firsts = |code: &str| -> Vec<String> {
        uses(&thread, code)
            .into_iter()
            .map(|u| u.path[0].clone())
            .collect()
    };
    assert_eq!(firsts("use crate::construct::Engine;"), ["construct"]);
    assert_eq!(firsts("use super::super::ralph::X;"), ["ralph"]);
    assert_eq!(firsts("use super::phase::Phase;"), ["thread"]);
    assert_eq!(firsts("crate::Ralph::builder()"), ["Ralph"]);
}

#[test]
fn the_checker_reads_grouped_paths_and_skips_comments_and_tests() {
    let paths = |code: &str| -> Vec<String> {
        let (code, _) = blank_tests(&strip_comments(code));
        uses(&["a".to_owned()], &code)
            .into_iter()
            .map(|u| u.path.join("::"))
            .collect()
    };
    assert_eq!(
        paths("use crate::agent::{\n    claude::{self, ClaudeCli},\n    Agent as A,\n};"),
        ["agent::claude", "agent::claude::ClaudeCli", "agent::Agent"]
    );
    assert_eq!(
        paths("// crate::b\nlet s = \"//\"; crate::c::d();"),
        ["c::d"]
    );
    assert_eq!(
        paths(
            "#[cfg(test)]\nfn helper() { crate::b::x() }\nuse crate::c;\n#[cfg(test)]\nmod tests { use crate::d; }"
        ),
        ["c"]
    );
    let (_, modules) = blank_tests("#[cfg(test)]\n#[path = \"x_props.rs\"]\nmod props;");
    assert_eq!(modules[0].name, "props");
    assert_eq!(modules[0].path.as_deref(), Some("x_props.rs"));
}

#[test]
fn the_checker_names_a_cycle_edge_by_edge() {
    let mut edges = Edges::new();
    for (from, to) in [
        ("a.rs", "b.rs"),
        ("b.rs", "c.rs"),
        ("c.rs", "a.rs"),
        ("c.rs", "d.rs"),
    ] {
        let said = format!("{from}:1: use {to}");
        edges
            .entry(from.to_owned())
            .or_default()
            .insert(to.to_owned(), said);
    }
    let found = cycles(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("a.rs → b.rs → c.rs → a.rs:"),
        "{}",
        found[0]
    );
    assert!(found[0].contains("c.rs:1: use a.rs"), "{}", found[0]);
}

/// What opens a file for writing, replaces, renames or cuts one.
const WRITES: [&str; 8] = [
    "fs::write(",
    "File::create(",
    "OpenOptions::new(",
    "fs::rename(",
    "fs::copy(",
    ".set_len(",
    ".create_new(true)",
    "write_all_at(",
];

/// Files outside `files/` that write, and why none of what they write is a state file:
/// each is a log, a file handed to a child process, or the fake agent's own hands.
const WRITES_ALLOWED: [(&str, &str); 6] = [
    (
        "runtime/logs.rs",
        "a run's log files: cut and rotated, never state",
    ),
    (
        "agent/fake/",
        "the fake agent writes the work tree as an agent would",
    ),
    (
        "agent/cli/command.rs",
        "the prompt file and output file a command agent is given",
    ),
    (
        "agent/cli/codex.rs",
        "the answer schema handed to `codex --output-schema`",
    ),
    (
        "git.rs",
        "the path list handed to `git add --pathspec-from-file`",
    ),
    ("thread/call.rs", "the final answer kept in the call's log"),
];

/// State files (the board, journals, seals, locks, marks) are written by `files/` alone,
/// where each way of writing one keeps its promise (atomic replace, append with fsync, a
/// seal): a writer elsewhere would be one that skips the fsync or the temp file.
#[test]
fn no_state_file_is_written_outside_the_files_module() {
    let mut wrong = Vec::new();
    for source in [LIBRARY, CORE, AGENTS].iter().flat_map(sources) {
        let allowed = WRITES_ALLOWED
            .iter()
            .any(|(file, _)| source.name.starts_with(file));
        if source.top() == "files" || allowed {
            continue;
        }
        for (n, line) in source.code.lines().enumerate() {
            if WRITES.iter().any(|write| line.contains(write)) {
                wrong.push(format!("{}:{}: {}", source.name, n + 1, line.trim()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "files written outside src/files/ (write state through files::atomic, journal, \
         seal or slot; or add a file that writes no state to WRITES_ALLOWED, with why):\n{}",
        wrong.join("\n")
    );
}
