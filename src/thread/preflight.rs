//! Preflight (seed 001): clean git tree or the thread's own branch, a baseline to return
//! to, a valid spec, an available agent, and no other thread running. Every failed check
//! is one clear message; passing moves the work to `ralph/<id>`.

use super::phase::PhaseKind;
use super::{ThreadError, ThreadRecord, Threads};
use crate::git::{Git, GitError};

/// How many changed paths a dirty-tree message names.
const SHOWN_CHANGES: usize = 5;

/// Runs the checks; on success the baseline is captured (kept when already on the managed
/// branch) and the managed branch checked out. Returns the failures (empty: passed).
pub(super) async fn run(
    threads: &Threads,
    record: &mut ThreadRecord,
) -> Result<Vec<String>, ThreadError> {
    let mut failures = Vec::new();
    let git = threads.git();
    let branch = format!("ralph/{}", record.id);
    let git_ok = git_checks(&git, &threads.kept_out(), &branch, record, &mut failures).await?;
    match threads.spec_refusal(record) {
        Err(e) => failures.push(format!("spec v{}: {e}", record.spec_version)),
        Ok(Some(why)) => failures.push(format!(
            "spec v{} ({}): {why}",
            record.spec_version,
            threads.spec_path(&record.id, record.spec_version).display()
        )),
        Ok(None) => {}
    }
    match threads.every_agent(&record.config) {
        Err(e) => failures.push(format!("the loop's agents: {e}")),
        Ok(chain) => {
            // Every agent the loop may fall back on, and the verifier, must be reachable now.
            for (name, agent) in chain {
                if let Err(e) = agent.check().await {
                    failures.push(format!(
                        "the agent `{name}` is not available: {}",
                        error_chain(&e)
                    ));
                }
            }
        }
    }
    for other in threads.list()? {
        if other == record.id {
            continue;
        }
        let other_record = threads.get(&other)?;
        let phase = other_record.phase.kind();
        if other_record.is_orphaned() {
            failures.push(format!(
                "thread {other} was left {phase} by a process that is gone; `resume` or `abandon` it first"
            ));
        } else if matches!(phase, PhaseKind::Running | PhaseKind::Verifying) {
            failures.push(format!(
                "thread {other} is {phase}; pause or finish it before starting another"
            ));
        }
    }
    if failures.is_empty() && git_ok {
        enter_branch(&git, &branch, record).await?;
    }
    threads.save(record)?;
    Ok(failures)
}

/// The git checks; true when git is usable (a repository with a baseline). ralph's own
/// files (`kept_out`) are never the user's uncommitted changes.
async fn git_checks(
    git: &Git,
    kept_out: &[&str],
    branch: &str,
    record: &mut ThreadRecord,
    failures: &mut Vec<String>,
) -> Result<bool, ThreadError> {
    if !git.is_repo().await {
        let failure = match git.refuse_unrunnable().await {
            Err(unavailable) => unavailable,
            Ok(()) => GitError::NotARepo(git.dir().to_path_buf()),
        };
        failures.push(failure.to_string());
        return Ok(false);
    }
    let on_managed = git.current_branch().await?.as_deref() == Some(branch);
    // Back on its own branch (a retried preflight, a resumed thread) the thread keeps the
    // baseline it started from; anywhere else the work starts here and now.
    if !(on_managed && record.baseline.is_some()) {
        match git.baseline().await {
            Ok(baseline) => record.baseline = Some(baseline),
            Err(e @ GitError::NoCommit(_)) => {
                failures.push(format!("no baseline to return to: {e}"));
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !on_managed {
        let changes = git.changes(kept_out).await?;
        if !changes.is_empty() {
            let shown: Vec<&str> = changes
                .iter()
                .take(SHOWN_CHANGES)
                .map(|l| l.get(3..).unwrap_or(l).trim())
                .collect();
            failures.push(format!(
                "the work tree has uncommitted changes ({} path(s): {}{}); commit or stash them first, or run on the thread's branch {branch}",
                changes.len(),
                shown.join(", "),
                if changes.len() > SHOWN_CHANGES { ", …" } else { "" }
            ));
        }
    }
    Ok(true)
}

async fn enter_branch(
    git: &Git,
    branch: &str,
    record: &mut ThreadRecord,
) -> Result<(), ThreadError> {
    if git.current_branch().await?.as_deref() != Some(branch) {
        if git.branch_exists(branch).await? {
            git.switch(branch).await?;
        } else if let Some(baseline) = &record.baseline {
            git.create_branch(branch, &baseline.commit_sha).await?;
        }
    }
    record.branch = Some(branch.to_owned());
    Ok(())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
