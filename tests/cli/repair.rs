//! `ralph repair [--adopt]` and the refusal that sends a person to it, through the command.

use super::*;

const FORGED: &str = "{\"t\":\"task\",\"id\":\"t-1\",\"name\":\"Write hello.txt\",\"s\":\"a\"}\n";

/// A project whose board holds t-1, pending, written by ralph, and then `line` appended.
fn with_appended(line: &str) -> tempfile::TempDir {
    let dir = project();
    let out = ralph(
        dir.path(),
        &[
            "task",
            "add",
            r#"{"name": "Write hello.txt", "accept": "it says hello"}"#,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan = dir.path().join(".ralph/plan.jsonl");
    let text = std::fs::read_to_string(&plan).unwrap();
    std::fs::write(&plan, text + line).unwrap();
    dir
}

#[test]
fn status_on_a_forged_state_file_exits_1_naming_the_file_the_line_and_the_repair() {
    let dir = with_appended(FORGED);

    let out = ralph(dir.path(), &["status"], &[]);

    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stderr(&out);
    assert!(
        text.contains(".ralph/plan.jsonl:2: not written by ralph"),
        "{text}"
    );
    assert!(
        text.contains("`ralph repair`") && text.contains("`ralph repair --adopt`"),
        "{text}"
    );
}

#[test]
fn repair_removes_the_forged_line_into_a_copy_and_says_so() {
    let dir = with_appended(FORGED);

    let out = ralph(dir.path(), &["repair"], &[]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("removed 1 line from line 2"), "{text}");
    let copy = std::fs::read_dir(dir.path().join(".ralph"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("plan.jsonl.removed-"))
        .expect("the copy beside plan.jsonl");
    assert!(text.contains(&*copy.to_string_lossy()), "{text}");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), FORGED);

    let status = ralph(dir.path(), &["status"], &[]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    assert!(stdout(&status).contains("pending"), "{}", stdout(&status));
    let again = ralph(dir.path(), &["repair"], &[]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("nothing to repair"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn repair_adopt_keeps_a_hand_written_seed_line() {
    let dir = with_appended("{\"t\":\"task\",\"id\":\"t-9\",\"name\":\"x\",\"s\":\"p\"}\n");

    let out = ralph(dir.path(), &["repair", "--adopt"], &[]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("adopted 1 line"), "{}", stdout(&out));
    let list = ralph(dir.path(), &["task", "list"], &[]);
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    assert!(stdout(&list).contains("t-9"), "{}", stdout(&list));
}

#[test]
fn repair_puts_back_a_threads_record_an_agent_changed() {
    let dir = project();
    std::fs::write(
        dir.path().join("t.md"),
        "# T\n\nDo it.\n\n<promise>DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] ok: `true`\n",
    )
    .unwrap();
    let out = ralph(
        dir.path(),
        &["thread", "new", "--title", "T", "--spec", "t.md"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let record = dir.path().join(".ralph/threads/1-t/thread.json");
    let sealed = std::fs::read_to_string(&record).unwrap();
    std::fs::write(&record, sealed.replace("Drafting", "Finalize")).unwrap();

    let show = ralph(dir.path(), &["thread", "show"], &[]);
    assert_eq!(show.status.code(), Some(1), "{}", stdout(&show));
    assert!(stderr(&show).contains("thread.json was changed by something other than ralph"));

    let out = ralph(dir.path(), &["repair"], &[]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("put back the last version ralph wrote of"),
        "{}",
        stdout(&out)
    );
    let show = ralph(dir.path(), &["thread", "show"], &[]);
    assert_eq!(show.status.code(), Some(0), "{}", stderr(&show));
    assert!(stdout(&show).contains("Drafting"), "{}", stdout(&show));
}
