//! `ralph tell`, `ralph answer` and `ralph stop`: steering a run from another terminal.

use std::path::Path;

use ralph::Error;

use crate::Result;

/// `ralph stop [--now]`.
pub(crate) fn stop(workspace: &Path, now: bool) -> Result<u8> {
    let stopped = match now {
        true => ralph::steer::stop_now(workspace),
        false => ralph::steer::stop(workspace),
    };
    match stopped {
        Ok(run) if now => println!("stopping the run ({run}) now, as SIGTERM does"),
        Ok(run) => println!(
            "asked the run ({run}) to stop once its agent runs and gates in flight are done \
             and recorded; it then exits 4, and running the same command resumes"
        ),
        Err(e @ Error::NoRunInProgress { .. }) => {
            eprintln!("error: {e}");
            eprintln!("next: `ralph status` shows where the work stands");
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    }
    Ok(0)
}

/// `ralph tell TEXT [--task ID | --thread ID] [--from NAME]`, `ralph tell --withdraw ID`.
pub(crate) fn tell(
    workspace: &Path,
    text: Option<String>,
    scope: Option<String>,
    from: Option<String>,
    withdraw: Option<String>,
) -> Result<u8> {
    if let Some(id) = withdraw {
        ralph::steer::withdraw(workspace, &id)?;
        println!("withdrew {id}: no agent call gets it from the next one on");
        return Ok(0);
    }
    let text = text.unwrap_or_default();
    let id = ralph::steer::tell(workspace, &text, scope.as_deref(), from.as_deref())?;
    let whom = scope.map_or("every agent call".to_owned(), |s| {
        format!("the agent calls for {s}")
    });
    println!("told {id}: the last section of the prompt of {whom}, from the next one on");
    println!(
        "next: `ralph tell --withdraw {id}` withdraws it; `ralph status` lists what is in force"
    );
    Ok(0)
}

/// `ralph answer SUBJECT TEXT [--from NAME]`.
pub(crate) fn answer(
    workspace: &Path,
    subject: &str,
    text: &str,
    from: Option<&str>,
) -> Result<u8> {
    let id = ralph::steer::answer(workspace, subject, text, from)?;
    match ralph::steer::in_progress_run(workspace)? {
        Some((run, _)) => println!(
            "answered {id}: the run in progress ({run}) takes it in before its next step; \
             {subject} goes on with it"
        ),
        None => {
            println!("answered {id}: {subject} goes on with it in the next run");
            println!("next: run the same command again (`ralph status` says which)");
        }
    }
    Ok(0)
}
