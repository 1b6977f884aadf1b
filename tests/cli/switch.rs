//! One board at a time, and a way to another spec (newcomer-and-bad-input row 70): a second
//! spec is refused with a `next:` that switches to it; the switch archives the first board
//! (its spend included) and a switch back brings it back as it was.

#![cfg(unix)]

use std::path::Path;

use crate::integrity::git;
use crate::{command, stderr, stdout};

/// Each spec's one task writes the file its spec names: `one.txt`, or `other.txt` for the
/// spec that says OTHER.
const AGENT: &str = r#"prompt=$(cat)
case "$prompt" in *other.txt*) file=other.txt ;; *) file=one.txt ;; esac
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write '"$file"'","accept":"it says done"}]}' ;;
  build) echo done > "$file"; printf 'Wrote it.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it says done"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

/// The integrity tests' repository with this agent, and two specs.
fn repository() -> tempfile::TempDir {
    let dir = crate::integrity::repository_with(AGENT);
    let ws = dir.path();
    std::fs::write(ws.join("spec.md"), "# One\nWrite one.txt.\n").unwrap();
    std::fs::write(ws.join("other.md"), "# Other\nWrite other.txt.\n").unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-qm", "two specs"]);
    dir
}

fn construct(ws: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["construct"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--agent", "mine"]);
    command(ws, &all).output().unwrap()
}

fn ok(out: std::process::Output) -> String {
    let text = format!("{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// The archives in `.ralph/archive`, by folder name.
fn archives(ws: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ws.join(".ralph/archive"))
        .map(|dir| {
            dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".gitignore")
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The `construct` scope's ledger lines since its last reset.
fn construct_spend(ws: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap();
    let mut lines = Vec::new();
    for line in text.lines() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        if line["scope"] != "construct" {
            continue;
        }
        match line["reset"] == true {
            true => lines.clear(),
            false => lines.push(line),
        }
    }
    lines
}

#[test]
fn a_second_spec_is_switched_to_and_back_with_its_board_and_spend() {
    let dir = repository();
    let ws = dir.path();
    ok(construct(ws, &["spec.md"]));
    let one_runs = construct_spend(ws).len();
    assert!(one_runs >= 3, "investigate, build, verify: {one_runs}");

    // Row 70: refused, with a way forward that is not deleting .ralph/.
    let refused = construct(ws, &["other.md"]);
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("spec.md") && err.contains("other.md"), "{err}");
    let next = crate::dead_ends::next_command(&refused);
    assert!(next.contains("other.md --switch"), "{next}");
    let switched = crate::dead_ends::run_printed(ws, &next);
    let text = ok(switched);
    assert!(text.contains("the board of spec.md archived in"), "{text}");
    assert!(ws.join("other.txt").exists(), "other.md's work: {text}");
    let subjects = git(ws, &["log", "--format=%s"]);
    assert!(
        subjects.contains("t-1: Write other.txt"),
        "ids start again: {subjects}"
    );
    let held = git(ws, &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(held.trim(), "other.txt", "{subjects}");
    let archived = archives(ws);
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert!(archived[0].starts_with("spec.md-"), "{archived:?}");
    let manifest = std::fs::read_to_string(
        ws.join(".ralph/archive")
            .join(&archived[0])
            .join("archive.json"),
    )
    .unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["spec"], "spec.md");
    assert_eq!(manifest["spent"]["runs"], one_runs as u64, "{manifest}");
    let other_runs = construct_spend(ws).len();

    // A person's edit of a tracked file would be committed by the other board's run.
    std::fs::write(
        ws.join("spec.md"),
        "# One\nWrite one.txt.\nA person's edit.\n",
    )
    .unwrap();
    let refused = construct(ws, &["spec.md", "--switch"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(stderr(&refused).contains("spec.md"), "{}", stderr(&refused));
    assert_eq!(archives(ws), archived, "nothing moved");
    git(ws, &["checkout", "--", "spec.md"]);

    // Back: spec.md's board as it was (complete), its spend counted again.
    let text = ok(construct(ws, &["spec.md", "--switch"]));
    assert!(text.contains("its own board brought back"), "{text}");
    assert!(text.to_lowercase().contains("complete"), "{text}");
    let spend = construct_spend(ws);
    assert_eq!(spend.len(), 1, "one restored line: {spend:?}");
    assert_eq!(spend[0]["restored"], true);
    assert_eq!(spend[0]["runs"], one_runs as u64);
    let archived = archives(ws);
    assert_eq!(archived.len(), 1, "other.md's now: {archived:?}");
    assert!(archived[0].starts_with("other.md-"), "{archived:?}");
    let status = stdout(&command(ws, &["status"]).output().unwrap());
    assert!(
        status.contains("Write one.txt") && !status.contains("Write other.txt"),
        "{status}"
    );

    // And forth again: other.md's board, complete, with its own spend.
    ok(construct(ws, &["other.md", "--switch"]));
    let spend = construct_spend(ws);
    assert_eq!(spend[0]["runs"], other_runs as u64, "{spend:?}");
    let subjects = git(ws, &["log", "--format=%s"]);
    assert_eq!(
        subjects.matches("Write other.txt").count(),
        1,
        "built once: {subjects}"
    );
}
