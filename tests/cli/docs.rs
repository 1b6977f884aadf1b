//! The docs stay true: every test `docs/conformance.md` cites exists where it says, every row
//! is shown by a test or is a difference explained in `docs/seed-differences.md`; the README
//! links the format pages and reaches every page and section of `docs/`; every relative link
//! of the README and of `docs/` leads to a file and a heading that exist; the configuration
//! page names every key and variable; and the FakeAgent page's example script runs.

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

/// What is wrong with the rows of `table`: a row listed twice, a ✔ with no test, a ≠ whose
/// id `differences` does not name as a whole id, a status other than those two, and a cited
/// function that is missing from its file or is no test. `source` reads a cited file
/// (`None`: no such file).
fn table_problems(
    table: &str,
    differences: &str,
    source: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for row in &rows(table) {
        if !ids.insert(row.id.clone()) {
            problems.push(format!("{}: listed twice", row.id));
        }
        match row.status.as_str() {
            "✔" if row.tests.is_empty() => problems.push(format!("{}: ✔ with no test", row.id)),
            "✔" => {}
            "≠" if !names_id(differences, &row.id) => {
                problems.push(format!("{}: ≠ but not in docs/seed-differences.md", row.id))
            }
            "≠" => {}
            other => problems.push(format!("{}: status {other}", row.id)),
        }
        for (name, file) in &row.tests {
            let text = source(file).unwrap_or_default();
            match test_function(&text, name) {
                Some(true) => {}
                Some(false) => problems.push(format!("{}: `{name}` in {file} is no test", row.id)),
                None => problems.push(format!("{}: no `fn {name}` in {file}", row.id)),
            }
        }
    }
    problems
}

/// Whether `text` names `id` as a whole id: `003-R3` is not named by `003-R30`.
fn names_id(text: &str, id: &str) -> bool {
    text.match_indices(id).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + id.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// Whether the function `name` defined in `source` is a test: `None` when no such function
/// is defined, `Some(true)` when one carries a test attribute (or is a property of a
/// `proptest!` block).
fn test_function(source: &str, name: &str) -> Option<bool> {
    let mut found = None;
    for pattern in [format!("fn {name}("), format!("fn {name}<")] {
        for (at, _) in source.match_indices(&pattern) {
            let is_test = attributes_before(&source[..at])
                .iter()
                .any(|a| is_test_attribute(a))
                || in_proptest_block(&source[..at]);
            found = Some(found.unwrap_or(false) || is_test);
        }
    }
    found
}

/// The attributes (`#[…]`, brackets included) written just before the end of `before`,
/// the text up to a function's `fn`: its qualifiers, comments and attributes are walked
/// back over, an attribute spanning lines (an rstest `#[case(…)]`) included.
fn attributes_before(before: &str) -> Vec<&str> {
    let mut rest = before.trim_end();
    for qualifier in [
        "async",
        "unsafe",
        "const",
        "pub(crate)",
        "pub(super)",
        "pub",
    ] {
        rest = rest.strip_suffix(qualifier).unwrap_or(rest).trim_end();
    }
    let mut attributes = Vec::new();
    loop {
        let line_start = rest.rfind('\n').map_or(0, |i| i + 1);
        if rest[line_start..].trim_start().starts_with("//") {
            rest = rest[..line_start].trim_end();
            continue;
        }
        let Some(open) = opening_bracket(rest) else {
            return attributes;
        };
        let Some(hash) = rest[..open].strip_suffix('#') else {
            return attributes;
        };
        attributes.push(&rest[hash.len()..]);
        rest = hash.trim_end();
    }
}

/// Where the `[` that the `]` ending `text` closes stands, if `text` ends with `]`.
fn opening_bracket(text: &str) -> Option<usize> {
    if !text.ends_with(']') {
        return None;
    }
    let mut depth = 0usize;
    for (i, c) in text.char_indices().rev() {
        match c {
            ']' => depth += 1,
            '[' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `attribute` (`#[…]`) makes a test: `#[test]`, `#[tokio::test(…)]`, `#[rstest]`,
/// `#[test_case(…)]`, by the last segment of its path.
fn is_test_attribute(attribute: &str) -> bool {
    let inner = attribute.trim_start_matches("#[").trim_end_matches(']');
    let path = inner.split(['(', ' ', '=']).next().unwrap_or_default();
    let last = path.rsplit("::").next().unwrap_or_default();
    matches!(last, "test" | "rstest" | "test_case")
}

/// Whether `before` (the text up to a function's `fn`) ends inside a `proptest! { … }`
/// block, whose functions are properties run as tests.
fn in_proptest_block(before: &str) -> bool {
    let Some(start) = before.rfind("proptest!") else {
        return false;
    };
    let block = &before[start..];
    let opened = block.matches('{').count();
    opened > 0 && opened > block.matches('}').count()
}

#[test]
fn the_conformance_table_cites_tests_that_exist_and_explains_every_difference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = std::fs::read_to_string(root.join("docs/conformance.md")).expect("the table");
    let differences =
        std::fs::read_to_string(root.join("docs/seed-differences.md")).expect("the differences");
    assert!(rows(&table).len() >= 280, "one row per requirement");
    let problems = table_problems(&table, &differences, |file| {
        std::fs::read_to_string(root.join(file)).ok()
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check itself: a cited function that is no test, or missing, is refused; each kind of
/// test the repository writes is taken.
#[test]
fn the_check_refuses_a_cited_function_that_is_no_test() {
    let source = r#"
fn helper() {}

/// A test, documented.
#[test]
fn plain() {}

#[tokio::test(flavor = "multi_thread")]
// why it runs on many threads
async fn on_tokio() {}

#[rstest]
#[case::one(Script::new().json(json!({"subtasks": [
    {"name": "a"}
]})))]
#[tokio::test]
async fn with_cases(#[case] script: Script) {}

#[allow(dead_code)]
pub(crate) fn allowed() {}

proptest! {
    #[allow(unused)]
    fn a_property(x in 0..3u8) {}
}
fn after_the_block() {}
"#;
    let table = "\
| 000-R1 | a | ✔ | `plain`, `on_tokio`, `with_cases`, `a_property` (src/a.rs) |
| 000-R2 | b | ✔ | `helper`, `allowed` (src/a.rs), `after_the_block` (src/a.rs) |
| 000-R3 | c | ✔ | `gone` (src/a.rs) |
";
    let problems = table_problems(table, "", |_| Some(source.to_owned()));
    assert_eq!(
        problems,
        [
            "000-R2: `helper` in src/a.rs is no test",
            "000-R2: `allowed` in src/a.rs is no test",
            "000-R2: `after_the_block` in src/a.rs is no test",
            "000-R3: no `fn gone` in src/a.rs",
        ]
    );
}

/// The check itself: a ≠ row's id must be named whole in seed-differences.md.
#[test]
fn the_check_wants_a_difference_named_by_its_whole_id() {
    let table = "| 003-R3 | `--once` | ≠ | docs/seed-differences.md |\n";
    let refused = ["| 003-R30 | x |", "| 003-R31, 1003-R3x |", "", "003-R3a"];
    for differences in refused {
        assert_eq!(
            table_problems(table, differences, |_| None),
            ["003-R3: ≠ but not in docs/seed-differences.md"],
            "{differences:?}"
        );
    }
    for differences in [
        "| 003-R3 | x |",
        "| 003-R3, 003-R30 |",
        "003-R30 and 003-R3.",
    ] {
        assert!(
            table_problems(table, differences, |_| None).is_empty(),
            "{differences:?}"
        );
    }
}

/// The README links the pages of the formats a command-agent author needs, and both
/// command tables (the README's short one, the whole one of `docs/running.md`) name
/// `ralph schema`.
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
    let running = std::fs::read_to_string(root.join("docs/running.md")).unwrap();
    for (name, text) in [("README", &readme), ("docs/running.md", &running)] {
        assert!(
            text.contains("| `ralph schema [ROLE]` |"),
            "{name}'s command table"
        );
    }
}

/// The pages the README's sections moved to: each of their sections is reached from the
/// README by a link to its heading.
const MOVED_TO: [&str; 7] = [
    "running.md",
    "configuration.md",
    "agent-clis.md",
    "library.md",
    "adapters.md",
    "design.md",
    "benchmarks.md",
];

/// The `##` and `###` headings of a markdown page, outside its fenced blocks.
fn headings(page: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in page.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && (line.starts_with("## ") || line.starts_with("### ")) {
            found.push(line.trim_start_matches('#').trim());
        }
    }
    found
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The targets of the markdown links of `text`: `](target)`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

/// Done when (issue 40): "`docs/` by audience; every moved section reachable from the
/// README". The README links every page of `docs/`, and every section of the pages its
/// sections moved to, by its heading's anchor.
#[test]
fn the_readme_reaches_every_page_and_section_of_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && !readme.contains(&format!("](docs/{name}")) {
            missing.push(format!("docs/{name}"));
        }
    }
    for page in MOVED_TO {
        let text = std::fs::read_to_string(root.join("docs").join(page)).unwrap();
        for heading in headings(&text) {
            let link = format!("](docs/{page}#{})", anchor(heading));
            if !readme.contains(&link) {
                missing.push(format!("{page}: {heading} ({link})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not reached from README.md:\n{}",
        missing.join("\n")
    );
}

/// Every relative link of the README and of the pages of `docs/` leads to a file that
/// exists, and a link to a heading of a markdown page (`page.md#anchor`) to a heading
/// that page has.
#[test]
fn every_relative_link_of_the_docs_leads_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            let shown = format!("{}: ({target})", page.strip_prefix(root).unwrap().display());
            if !path.exists() {
                broken.push(shown);
            } else if !heading.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let linked = std::fs::read_to_string(&path).unwrap();
                if !headings(&linked).iter().any(|h| anchor(h) == heading) {
                    broken.push(shown);
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The check itself: GitHub's anchors, as the README's links write them.
#[test]
fn anchors_are_githubs() {
    assert_eq!(anchor("The `ralph` command"), "the-ralph-command");
    assert_eq!(
        anchor("Every agent's table, and its variables"),
        "every-agents-table-and-its-variables"
    );
    assert_eq!(
        anchor("Building tasks at once: `build_concurrency`"),
        "building-tasks-at-once-build_concurrency"
    );
    assert_eq!(
        anchor("Plan mode and build mode (`implementation.json`)"),
        "plan-mode-and-build-mode-implementationjson"
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
/// `[agent.NAME]`) is on the configuration page (`docs/configuration.md`) with its
/// `RALPH_…` variable, and so is every top-level setting and every variable ralph reads
/// besides the settings.
#[test]
fn the_configuration_page_names_every_key_and_its_variable() {
    use ralph::config::{CommandConfig, Config};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    // The CLIs' tables as a workspace's config holds them, their optional keys set.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "[codex]\nbin = \"codex\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let config = serde_json::to_value(Config::load(dir.path()).unwrap()).unwrap();
    let table = |name: &str| keys(&config[name]);
    let mut command = CommandConfig::default();
    command.answer_pointer = Some("/result".into());
    command.idle_timeout = Some(std::time::Duration::from_secs(1));
    let tables = [
        ("CLAUDE", table("claude")),
        ("CODEX", table("codex")),
        ("GEMINI", table("codex")),
        ("OPENCODE", table("codex")),
        ("AGENT__NAME", keys(&command)),
    ];
    let mut missing = Vec::new();
    for (table, keys) in &tables {
        assert!(keys.len() >= 5, "{table}: {keys:?}");
        for key in keys {
            if !page.contains(&format!("| `{key}` |")) {
                missing.push(format!("the key {key} of {table}"));
            }
            let var = format!("`RALPH_{table}__{}`", key.to_ascii_uppercase());
            if !page.contains(&var) {
                missing.push(var);
            }
        }
    }
    for var in [
        "RALPH_CLAUDE_BIN",
        "RALPH_LOG",
        "RALPH_RUN_COOKIE",
        "RALPH_EVENT",
        "RALPH_USAGE_FILE",
        "RALPH_SKIP_REAL_CLAUDE",
        "RALPH_CLAUDE_CACHE",
    ] {
        if !page.contains(&format!("`{var}`")) {
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
        if !shown.iter().any(|s| page.contains(s)) {
            missing.push(format!("the setting {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md:\n{}",
        missing.join("\n")
    );
}

/// The contents of the fenced blocks of `page` in `lang` (```` ```toml ````), in order.
fn fenced<'a>(page: &'a str, lang: &str) -> Vec<&'a str> {
    let open = format!("```{lang}\n");
    page.split(open.as_str())
        .skip(1)
        .filter_map(|block| block.find("```").map(|end| &block[..end]))
        .collect()
}

/// The page of worked examples, one per agent CLI.
fn agents_page() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("docs/agents.md")).expect("docs/agents.md")
}

/// `config` as ralph's loader reads it from a workspace holding it as `ralph.toml`: the
/// error, naming the key, when ralph would refuse it.
fn loaded(config: &str) -> Result<serde_json::Value, String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ralph.toml"), config).unwrap();
    let config = ralph::config::Config::load(dir.path()).map_err(|e| e.to_string())?;
    Ok(serde_json::to_value(config).unwrap())
}

/// Every `ralph.toml` of the agents page loads with ralph's own config loader, and there is
/// one for each agent: a key ralph does not know, or a value it refuses, fails here first.
#[test]
fn every_ralph_toml_of_the_agents_page_loads() {
    let page = agents_page();
    let examples: Vec<&str> = fenced(&page, "toml")
        .into_iter()
        .filter(|block| block.starts_with("# ralph.toml\n"))
        .collect();
    let mut agents = BTreeSet::new();
    for example in &examples {
        let config = loaded(example).unwrap_or_else(|e| panic!("{e}\n{example}"));
        let named = config["agents"].as_array().unwrap().iter();
        agents.extend(named.filter_map(|a| a.as_str().map(str::to_owned)));
    }
    let expected = ["aider", "claude", "codex", "gemini", "opencode"];
    assert_eq!(agents, expected.map(str::to_owned).into());
    assert!(
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap()
            .contains("](docs/agents.md)"),
        "the README links docs/agents.md"
    );
}

/// The check itself: a key ralph does not know is refused, naming it.
#[test]
fn the_loader_refuses_an_example_with_an_unknown_key() {
    let error = loaded("[gemini]\nbase_url = \"https://x\"\n").unwrap_err();
    assert!(error.contains("base_url"), "{error}");
}

/// Codex's `-c key=value` overrides as the table they set.
fn overrides(args: &[String]) -> toml::Table {
    let pairs: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "-c")
        .collect();
    toml::from_str(&pairs.join("\n")).unwrap()
}

/// What the agents page tells users to write in the CLIs' own configuration is what the
/// test harnesses write, which the real CLIs are tested with: Gemini's settings, Codex's
/// model provider, opencode's provider with its `baseURL`.
#[tokio::test]
async fn the_agents_page_sets_up_each_cli_as_the_test_harnesses_do() {
    use crate::support::{gemini_api, responses_api::ResponsesApi};
    let page = agents_page();

    let settings: serde_json::Value = serde_json::from_str(fenced(&page, "json")[0]).unwrap();
    let tested: serde_json::Value = serde_json::from_str(gemini_api::SETTINGS).unwrap();
    assert_eq!(settings, tested, "Gemini's settings.json");

    let api = ResponsesApi::with_script([]).await;
    let provider = |config: &toml::Table| {
        let name = config["model_provider"].as_str().unwrap().to_owned();
        config["model_providers"][&name].as_table().unwrap().clone()
    };
    let tested = provider(&overrides(&api.args()));
    let codex_file = fenced(&page, "toml")
        .into_iter()
        .find(|block| block.starts_with("# $CODEX_HOME/config.toml"))
        .unwrap();
    let shown = provider(&toml::from_str(codex_file).unwrap());
    assert!(shown.keys().all(|k| tested.contains_key(k)), "{shown:?}");
    assert_eq!(shown["wire_api"], tested["wire_api"]);
    let codex_args = fenced(&page, "toml")
        .into_iter()
        .find(|block| block.contains("args = [\n    \"-c\""))
        .unwrap();
    let args = loaded(codex_args).unwrap()["codex"]["args"].clone();
    let args: Vec<String> = serde_json::from_value(args).unwrap();
    assert_eq!(
        provider(&overrides(&args)),
        shown,
        "args and config.toml agree"
    );

    let home = tempfile::tempdir().unwrap();
    let tested = api.opencode_env(home.path());
    let tested = &tested
        .iter()
        .find(|(k, _)| k == "OPENCODE_CONFIG_CONTENT")
        .unwrap()
        .1;
    let opencode = fenced(&page, "toml")
        .into_iter()
        .find(|block| block.contains("[opencode.env]"))
        .unwrap();
    let shown = loaded(opencode).unwrap()["opencode"]["env"]["OPENCODE_CONFIG_CONTENT"].clone();
    let shown: serde_json::Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    let tested: serde_json::Value = serde_json::from_str(tested).unwrap();
    let options = |config: &serde_json::Value| keys(&config["provider"]["openai"]["options"]);
    assert_eq!(options(&shown), options(&tested));
    assert_eq!(keys(&shown), keys(&tested));
}

/// The crates in the order the design doc's graph draws them, top first: the line of
/// `docs/design.md` that starts with `ralph-loop ──▶`.
fn drawn_order(design: &str) -> Vec<String> {
    let line = design
        .lines()
        .find(|l| l.starts_with("ralph-loop ──▶"))
        .expect("docs/design.md draws the crate graph on a line `ralph-loop ──▶ …`");
    line.split("──▶")
        .map(|name| name.trim().to_owned())
        .collect()
}

/// The ralph crates among a manifest's dependencies (target-specific ones too; not the
/// dev-dependencies, which only tests and doc examples see).
fn ralph_dependencies(manifest: &toml::Table) -> BTreeSet<String> {
    let mut tables: Vec<&toml::Table> = manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .into_iter()
        .collect();
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        tables.extend(
            targets
                .values()
                .filter_map(|t| t.get("dependencies").and_then(toml::Value::as_table)),
        );
    }
    tables
        .into_iter()
        .flat_map(|t| t.keys())
        .filter(|name| name.starts_with("ralph-loop"))
        .cloned()
        .collect()
}

/// Each dependency of a crate on one at or above it in `order`, said as `a → b`.
fn upward(order: &[String], crates: &[(String, BTreeSet<String>)]) -> Vec<String> {
    let rank = |name: &str| order.iter().position(|o| o == name);
    let mut wrong = Vec::new();
    for (name, deps) in crates {
        let Some(at) = rank(name) else {
            wrong.push(format!("{name} is not in the graph"));
            continue;
        };
        for dep in deps {
            if rank(dep).is_none_or(|below| below <= at) {
                wrong.push(format!("{name} → {dep}"));
            }
        }
    }
    wrong
}

/// Cargo enforces the layers because each crate's dependencies point down the graph the
/// design doc draws: a crate that came to depend on one above it (or a new crate the doc
/// does not draw) fails here, before a wrong-way import could compile.
#[test]
fn the_crates_depend_only_on_the_crates_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
    let order = drawn_order(&design);
    let mut crates = Vec::new();
    let mut manifests = vec![root.join("Cargo.toml")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        manifests.push(entry.unwrap().path().join("Cargo.toml"));
    }
    for path in manifests {
        let manifest: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        let name = manifest["package"]["name"].as_str().unwrap().to_owned();
        crates.push((name, ralph_dependencies(&manifest)));
    }
    assert_eq!(
        crates.len(),
        order.len(),
        "crates {crates:?}, drawn {order:?}"
    );
    let wrong = upward(&order, &crates);
    assert!(wrong.is_empty(), "dependencies up the graph: {wrong:?}");
}

/// The check itself refuses a dependency upward or sideways, and a crate left undrawn.
#[test]
fn the_crate_check_refuses_a_dependency_upward() {
    let order: Vec<String> = ["top", "middle", "bottom"].map(String::from).to_vec();
    let crates = |pairs: &[(&str, &[&str])]| -> Vec<(String, BTreeSet<String>)> {
        pairs
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    let fine = crates(&[("top", &["middle", "bottom"]), ("middle", &["bottom"])]);
    assert!(upward(&order, &fine).is_empty());
    let wrong = crates(&[
        ("bottom", &["middle"]),
        ("middle", &["middle"]),
        ("side", &[]),
    ]);
    assert_eq!(
        upward(&order, &wrong),
        [
            "bottom → middle",
            "middle → middle",
            "side is not in the graph"
        ]
    );
}
