//! The docs stay true: every test `docs/conformance.md` cites exists where it says, every row
//! is shown by a test or is a difference explained in `docs/seed-differences.md`; the README
//! links the format pages, and the FakeAgent page's example script runs.

use std::collections::BTreeSet;
use std::path::Path;

/// One row of the conformance table: the id, the status, and `(test, file)` pairs.
struct Row {
    id: String,
    status: String,
    tests: Vec<(String, String)>,
}

fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
            let id = cells.first()?.trim();
            let is_row = id.len() > 5 && id.as_bytes()[3] == b'-' && id[4..].starts_with('R');
            (is_row && cells.len() >= 4).then(|| Row {
                id: id.to_owned(),
                status: cells[2].trim().to_owned(),
                tests: cited(cells[3]),
            })
        })
        .collect()
}

/// The `name` (path) citations of a cell: "`a`, `b` (tests/x.rs), `c` (src/y.rs)".
fn cited(cell: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut names = Vec::new();
    let mut rest = cell;
    while let Some(start) = rest.find(['`', '(']) {
        let after = &rest[start + 1..];
        let close = if rest[start..].starts_with('`') {
            '`'
        } else {
            ')'
        };
        let Some(end) = after.find(close) else { break };
        let inner = &after[..end];
        if close == '`' {
            names.push(inner.to_owned());
        } else if inner.ends_with(".rs") {
            out.extend(names.drain(..).map(|n| (n, inner.to_owned())));
        }
        rest = &after[end + 1..];
    }
    out
}

#[test]
fn the_conformance_table_cites_tests_that_exist_and_explains_every_difference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = std::fs::read_to_string(root.join("docs/conformance.md")).expect("the table");
    let differences =
        std::fs::read_to_string(root.join("docs/seed-differences.md")).expect("the differences");
    let rows = rows(&table);
    assert!(rows.len() >= 280, "one row per requirement: {}", rows.len());
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for row in &rows {
        if !ids.insert(row.id.clone()) {
            problems.push(format!("{}: listed twice", row.id));
        }
        match row.status.as_str() {
            "✔" if row.tests.is_empty() => problems.push(format!("{}: ✔ with no test", row.id)),
            "✔" => {}
            "≠" if !differences.contains(&row.id) => {
                problems.push(format!("{}: ≠ but not in docs/seed-differences.md", row.id))
            }
            "≠" => {}
            other => problems.push(format!("{}: status {other}", row.id)),
        }
        for (name, file) in &row.tests {
            let source = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            if !source.contains(&format!("fn {name}(")) && !source.contains(&format!("fn {name}<"))
            {
                problems.push(format!("{}: no `fn {name}` in {file}", row.id));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The README links the pages of the formats a command-agent author needs.
#[test]
fn the_readme_links_the_format_pages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for page in ["docs/fake-agent.md", "docs/answers.md"] {
        assert!(
            readme.contains(&format!("]({page})")),
            "README does not link {page}"
        );
        assert!(root.join(page).is_file(), "{page}");
    }
    assert!(
        readme.contains("| `ralph schema [ROLE]` |"),
        "README's command table"
    );
}

/// The whole script at the end of `docs/fake-agent.md` runs `ralph construct` to a
/// complete spec, as the page says.
#[test]
fn the_script_pages_example_completes_a_spec() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/fake-agent.md")).unwrap();
    let block = page.rsplit("```toml\n").next().unwrap();
    let script = &block[..block.find("```").unwrap()];
    let dir = crate::project();
    std::fs::write(dir.path().join("script.toml"), script).unwrap();
    let out = crate::ralph(
        dir.path(),
        &["construct", "spec.md", "--script", "script.toml"],
        &[],
    );
    let text = crate::stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        crate::stderr(&out)
    );
    assert!(text.contains("Spec complete"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
}

/// The keys of a config table, as it serializes with every optional key set.
fn keys(table: impl serde::Serialize) -> Vec<String> {
    let value = serde_json::to_value(table).unwrap();
    value.as_object().unwrap().keys().cloned().collect()
}

/// Every key of each agent's table (`[claude]`, `[codex]`, `[gemini]`, `[opencode]`,
/// `[agent.NAME]`) is in the README with its `RALPH_…` variable, and so is every
/// top-level setting and every variable ralph reads besides the settings.
#[test]
fn the_readme_names_every_agent_key_and_its_variable() {
    use ralph::config::{ClaudeConfig, CliConfig, CommandConfig, Config};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut cli = CliConfig::default();
    cli.bin = Some("codex".into());
    cli.model = Some("m".into());
    let mut command = CommandConfig::default();
    command.answer_pointer = Some("/result".into());
    command.idle_timeout = Some(std::time::Duration::from_secs(1));
    let tables = [
        ("CLAUDE", keys(ClaudeConfig::default())),
        ("CODEX", keys(&cli)),
        ("GEMINI", keys(&cli)),
        ("OPENCODE", keys(&cli)),
        ("AGENT__NAME", keys(&command)),
    ];
    let mut missing = Vec::new();
    for (table, keys) in &tables {
        assert!(keys.len() >= 5, "{table}: {keys:?}");
        for key in keys {
            if !readme.contains(&format!("| `{key}` |")) {
                missing.push(format!("the key {key} of {table}"));
            }
            let var = format!("`RALPH_{table}__{}`", key.to_ascii_uppercase());
            if !readme.contains(&var) {
                missing.push(var);
            }
        }
    }
    for var in [
        "RALPH_CLAUDE_BIN",
        "RALPH_LOG",
        "RALPH_RUN_COOKIE",
        "RALPH_EVENT",
        "RALPH_SKIP_REAL_CLAUDE",
        "RALPH_CLAUDE_CACHE",
    ] {
        if !readme.contains(&format!("`{var}`")) {
            missing.push(var.to_owned());
        }
    }
    for key in keys(Config::default()) {
        let shown = [
            format!("\n{key} ="),
            format!("[{key}]"),
            format!("[[{key}]]"),
            format!("[{key}."),
        ];
        if !shown.iter().any(|s| readme.contains(s)) {
            missing.push(format!("the setting {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not in README.md:\n{}",
        missing.join("\n")
    );
}
