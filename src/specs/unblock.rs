//! A blocked task of build mode pending again (`ralph task unblock SPEC/TASK [--restore]`,
//! [`Ralph::unblock_spec_task`](crate::Ralph::unblock_spec_task)), as `ralph task unblock`
//! does for the construct board: after a person fixed what blocked it.
//!
//! The task goes back to pending with a fresh retry budget (its last failure kept, or why
//! it was blocked, so its next session's prompt says what went wrong); a spec given up after its failed rounds
//! gets a fresh budget of rounds too. With `restore`, the work build mode set aside when
//! the spec blocked (the stash entry another spec's turn made, see
//! [`set_aside_label`](super::build::set_aside_label)) comes back into the work tree as that
//! spec's turn: the next run takes it up and commits it with the spec.

use super::build;
use super::implementation::{ImplementationStore, SpecEntry, Status};
use crate::runtime::Context;
use crate::runtime::error::{EditError, Error, SpecsError};
use crate::runtime::workspace::{self, RunLock};

/// Unblocks task `task` of spec `spec` (its id, or its file as `implementation.json` writes
/// it); with `restore`, gives back its set-aside work. Returns the stash entry given back.
pub(crate) async fn unblock(
    ctx: &Context,
    spec: &str,
    task: &str,
    restore: bool,
) -> Result<Option<String>, Error> {
    let _lock = RunLock::take(&ctx.workspace).await?;
    let store = ImplementationStore::new(ctx.workspace.join(&ctx.config.planning.implementation))
        .copies_in(workspace::state_dir(&ctx.workspace));
    let mut plan = store.load()?.ok_or_else(|| SpecsError::NoImplementation {
        path: store.path().to_path_buf(),
    })?;
    let Some(index) = plan.named(spec) else {
        return Err(SpecsError::UnknownSpec {
            spec: spec.to_owned(),
            implementation: store.path().to_path_buf(),
            known: plan.specs.iter().map(|s| s.id.clone()).collect(),
        }
        .into());
    };
    let spec = plan.specs[index].id.clone();
    unblock_in(&mut plan.specs[index], task)?;
    store.save(&mut plan, "task-unblock")?;
    match restore {
        true => give_back(ctx, &spec, task).await,
        false => Ok(None),
    }
}

/// Task `task` of `entry` pending with a fresh retry budget, and `entry` with fresh rounds
/// when it was given up.
fn unblock_in(entry: &mut SpecEntry, task: &str) -> Result<(), Error> {
    let refuse = |reason: String| {
        Error::Edit(EditError::Invalid {
            edit: "task unblock",
            field: format!("{}/{task}", entry.id),
            reason,
        })
    };
    let known: Vec<&str> = entry.tasks.iter().map(|t| t.id.as_str()).collect();
    let Some(found) = entry.tasks.iter().position(|t| t.id == task) else {
        return Err(refuse(format!(
            "names no task of {} (its tasks: {})",
            entry.id,
            known.join(", ")
        )));
    };
    let status = entry.tasks[found].status;
    if status != Status::Blocked {
        return Err(refuse(format!(
            "is {status:?}, not blocked: only a blocked task can be unblocked"
        )));
    }
    let entry_task = &mut entry.tasks[found];
    entry_task.status = Status::Pending;
    entry_task.attempts = 0;
    if let Some(reason) = entry_task.blocked_reason.take()
        && entry_task.last_failure.is_none()
    {
        // Its next session is told why the last one stopped (a question, a missing piece).
        entry_task.last_failure = Some(crate::output::bounded_failure(&format!(
            "The last session was blocked: {reason}. A person has since unblocked the task."
        )));
    }
    if entry.status == Status::Blocked {
        entry.status = Status::InProgress;
        entry.attempts = 0;
        entry.blocked_reason = None;
    }
    Ok(())
}

/// Pops the stash entry holding what `spec` (blocked at `task`) left, as `spec`'s turn; the
/// entry's name, or `None` when nothing was set aside (its work is still in the tree).
async fn give_back(ctx: &Context, spec: &str, task: &str) -> Result<Option<String>, Error> {
    let git = ctx.git(&ctx.workspace);
    let mut found = None;
    for label in [
        build::set_aside_label(spec, Some(task)),
        build::set_aside_label(spec, None),
    ] {
        found = git.stash_named(&label).await?;
        if found.is_some() {
            break;
        }
    }
    let (Some((entry, message)), Some(home)) = (found, build::home(ctx).await?) else {
        return Ok(None);
    };
    // The tree is handed to the spec: no other turn's work nor a person's edit may mix in.
    home.hand_over().await?;
    // The turn begins before the work comes back: its untracked files are the spec's, not
    // the user's; and the tree as it then is, is how this "run" leaves it.
    home.begin_turn(spec).await?;
    git.stash_pop(&entry).await?;
    home.note_stop().await?;
    Ok(Some(message))
}
