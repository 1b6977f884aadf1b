//! What ralph asks the CLI's `/compact` to keep, to summarize and to drop, and the form of
//! the summary: seed 000's compaction strategy. The work tree's uncommitted changes go
//! into the request as git sees them, so the summary keeps them even if the session lost
//! track.

use std::path::Path;

use crate::git::Git;

/// Lines of the uncommitted-changes summary the request carries at most.
const CHANGES_SHOWN: usize = 40;

/// The policy, after `/compact` (the CLI takes the rest of the message as its instructions).
const POLICY: &str = "\
Compact this session so the task can go on from the summary alone.

Preserve in full:
- the current task: its name, notes and acceptance criteria;
- the files being edited: their paths and the sections that matter;
- the uncommitted changes (listed below);
- recent errors and blockers;
- the decisions made and why.

Summarize in a line each:
- exploration, as \"Searched X, found Y relevant files\";
- tool outputs, as \"Ran tests: 5 passed, 2 failed (test_foo, test_bar)\";
- code reads, as \"Read file.ts: exports functions A, B, C\".

Discard:
- verbose test output and stack traces (keep their summary);
- the full contents of files already processed;
- exploration that found nothing relevant;
- earlier compaction summaries (fold them into this one).

Write the summary in exactly this form:
=== COMPACTED CONTEXT ===
Task: <current task>
Progress: <what has been done>
Current state: <where the work stands>
Key files: <files being modified>
Blockers: <issues met, or none>
Next step: <what to do next>
=== END COMPACTED ===";

/// The `/compact` message for a session working in `workspace`.
pub(super) async fn request(workspace: &Path) -> String {
    format!(
        "/compact {POLICY}\n\nUncommitted changes (git diff --stat, and new files):\n{}",
        uncommitted(workspace).await
    )
}

/// The work tree's changes against HEAD, ralph's own state left out; a short note when
/// there is no repository to ask.
async fn uncommitted(workspace: &Path) -> String {
    let git = Git::new(workspace);
    if !git.is_repo().await {
        return "(not a git repository)".into();
    }
    let stat = git.diff_stat(&[".ralph"]).await.unwrap_or_default();
    let new_files = git.changes(&[".ralph"]).await.unwrap_or_default();
    let lines: Vec<String> = stat
        .lines()
        .map(|l| l.trim().to_owned())
        .chain(
            new_files
                .iter()
                .filter_map(|l| l.strip_prefix("?? "))
                .map(|path| format!("{path} (new)")),
        )
        .collect();
    if lines.is_empty() {
        return "(none)".into();
    }
    let mut shown: Vec<String> = lines.iter().take(CHANGES_SHOWN).cloned().collect();
    if lines.len() > CHANGES_SHOWN {
        shown.push(format!("… and {} more lines", lines.len() - CHANGES_SHOWN));
    }
    shown.join("\n")
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_request_carries_the_policy_the_format_and_the_changes() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::new(dir.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid");
        git.init().await.unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        git.commit_all("init", &[]).await.unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "new\n").unwrap();
        std::fs::create_dir(dir.path().join(".ralph")).unwrap();
        std::fs::write(dir.path().join(".ralph/state"), "x\n").unwrap();

        let text = request(dir.path()).await;

        assert!(text.starts_with("/compact "), "{text}");
        for part in [
            "Preserve in full:",
            "Summarize in a line each:",
            "Discard:",
            "=== COMPACTED CONTEXT ===",
            "Next step:",
            "=== END COMPACTED ===",
            "a.txt | 1 +",
            "b.txt (new)",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
        assert!(!text.contains(".ralph/state"), "ralph's own state: {text}");
    }

    #[tokio::test]
    async fn outside_a_repository_the_request_says_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            request(dir.path())
                .await
                .ends_with("(not a git repository)")
        );
    }

    /// The items of `heading`'s section of the request: its `- ` lines, up to the next
    /// blank line.
    fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
        let start = text.find(heading).expect(heading) + heading.len();
        text[start..]
            .trim_start_matches('\n')
            .lines()
            .take_while(|l| !l.is_empty())
            .collect()
    }

    /// Audit rows 000-R56, 000-R57, 000-R58: each item of seed 000's compaction strategy
    /// is asked for under its own heading (kept in full, summarized, discarded), the
    /// summaries in the seed's example wording.
    #[tokio::test]
    async fn each_item_of_the_policy_is_under_its_heading() {
        let dir = tempfile::tempdir().unwrap();
        let text = request(dir.path()).await;

        assert_eq!(
            section(&text, "Preserve in full:"),
            [
                "- the current task: its name, notes and acceptance criteria;",
                "- the files being edited: their paths and the sections that matter;",
                "- the uncommitted changes (listed below);",
                "- recent errors and blockers;",
                "- the decisions made and why.",
            ]
        );
        assert_eq!(
            section(&text, "Summarize in a line each:"),
            [
                "- exploration, as \"Searched X, found Y relevant files\";",
                "- tool outputs, as \"Ran tests: 5 passed, 2 failed (test_foo, test_bar)\";",
                "- code reads, as \"Read file.ts: exports functions A, B, C\".",
            ]
        );
        assert_eq!(
            section(&text, "Discard:"),
            [
                "- verbose test output and stack traces (keep their summary);",
                "- the full contents of files already processed;",
                "- exploration that found nothing relevant;",
                "- earlier compaction summaries (fold them into this one).",
            ]
        );
        assert_eq!(
            section(&text, "Write the summary in exactly this form:"),
            [
                "=== COMPACTED CONTEXT ===",
                "Task: <current task>",
                "Progress: <what has been done>",
                "Current state: <where the work stands>",
                "Key files: <files being modified>",
                "Blockers: <issues met, or none>",
                "Next step: <what to do next>",
                "=== END COMPACTED ===",
            ]
        );
    }
}
