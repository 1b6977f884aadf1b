//! The layering rule, checked: a module imports only from its own layer or the layers
//! below it, and the pipelines never import one another.
//!
//! ```text
//! 5 facade      lib.rs (re-exports), ralph, board, mock
//! 4 pipelines   construct | specs | thread
//! 3 runtime     runtime
//! 2 seams       agent, gate, store, prioritize, and the data they exchange
//! 1 foundation  process, files, time, git, signal (the marker parser), output, logfile
//! ```
//!
//! Read from the sources: every `crate::…` path, and every `super::…` path resolved against
//! the file's own module, outside comments and before the file's `#[cfg(test)]` (tests may
//! use anything).

use std::path::{Path, PathBuf};

/// The layer of a top-level module, by name; `None` for a name that is not a module.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "" | "ralph" | "board" | "mock" => 5,
        "construct" | "specs" | "thread" => 4,
        "runtime" => 3,
        "agent" | "gate" | "store" | "prioritize" | "model" | "answer" | "prompt" | "event"
        | "outcome" | "config" | "context" => 2,
        "process" | "files" | "time" | "git" | "signal" | "output" | "logfile" => 1,
        _ => return None,
    })
}

const PIPELINES: [&str; 3] = ["construct", "specs", "thread"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file: `src/a/b.rs` → `[a, b]`, `src/a/mod.rs` → `[a]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The top-level module each path in `code` reaches, starting from `module`.
fn targets(module: &[String], code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        // Only a path's first segment: skip `foo::crate::` (never written) and `super::super`.
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b':') {
            continue;
        }
        let mut rest = &code[at..];
        let mut base: Vec<String> = if rest.starts_with("crate::") {
            rest = &rest["crate::".len()..];
            Vec::new()
        } else {
            let mut base = module.to_vec();
            while let Some(tail) = rest.strip_prefix("super::") {
                base.pop();
                rest = tail;
            }
            base
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        base.push(name);
        found.push(base[0].clone());
    }
    found
}

#[test]
fn no_module_imports_a_layer_above_it_or_a_sibling_pipeline() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let module = module_of(&src, &file);
        let own = module.first().cloned().unwrap_or_default();
        // Test-only files: this one, and the property tests included under `#[cfg(test)]`.
        let test_only = file.to_string_lossy().ends_with("_props.rs");
        // `src/bin/`: programs on the public API, above every layer of the library.
        if own == "layers" || own == "bin" || test_only {
            continue;
        }
        let Some(own_layer) = layer(&own) else {
            panic!(
                "{} is in no layer: add its module to `layer`",
                file.display()
            );
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            for target in targets(&module, code) {
                // An item of the crate root (`crate::Ralph`) is a facade re-export.
                let target = if target.starts_with(char::is_uppercase) {
                    String::new()
                } else {
                    target
                };
                let Some(target_layer) = layer(&target) else {
                    continue;
                };
                let sideways = target != own
                    && PIPELINES.contains(&target.as_str())
                    && PIPELINES.contains(&own.as_str());
                if target_layer > own_layer || sideways {
                    let shown = if target.is_empty() {
                        "the facade"
                    } else {
                        &target
                    };
                    wrong.push(format!(
                        "{}:{}: {own} (layer {own_layer}) uses {shown} (layer {target_layer}): {}",
                        file.strip_prefix(&src).unwrap().display(),
                        n + 1,
                        code.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_upward_and_sideways_paths() {
    let thread = vec!["thread".to_owned(), "running".to_owned()];
    assert_eq!(
        targets(&thread, "use crate::construct::Engine;"),
        ["construct"]
    );
    assert_eq!(targets(&thread, "use super::super::ralph::X;"), ["ralph"]);
    assert_eq!(targets(&thread, "use super::phase::Phase;"), ["thread"]);
    assert_eq!(targets(&thread, "crate::Ralph::builder()"), ["Ralph"]);
}

/// Where the library may start a process: only `process/`, which puts every process in a
/// group of its own with the run's cookie and sweeps what it leaves (`src/bin/` is a
/// program on top of the library: its editor must own the terminal).
const SPAWNS: [&str; 4] = [
    "process::Command",
    "Command::new(",
    "std::process::Child",
    "posix_spawn",
];

#[test]
fn no_process_is_spawned_outside_the_process_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let module = module_of(&src, &file);
        let own = module.first().map_or("", String::as_str);
        if matches!(own, "process" | "bin" | "layers")
            || file.to_string_lossy().ends_with("_props.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            if SPAWNS.iter().any(|spawn| code.contains(spawn)) {
                wrong.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&src).unwrap().display(),
                    n + 1,
                    code.trim()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "processes started outside src/process/:\n{}",
        wrong.join("\n")
    );
}
