//! `ralph stop`: steering a run in progress from another terminal.

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
