//! Stopping a run by a signal, the same way in every mode: see
//! [`steer::listen_for_signals`](crate::steer::listen_for_signals).

use std::path::Path;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::process::StopToken;

/// A signal that stops a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Interrupt {
    /// SIGINT: Ctrl+C in a terminal.
    Int,
    /// SIGTERM: CI runners cancelling a job, `timeout`, `kill`.
    Term,
    /// SIGHUP: the terminal went away.
    Hup,
}

impl Interrupt {
    /// The exit code a shell gives a process this signal ended: 128 + its number (130 for
    /// SIGINT, 143 for SIGTERM, 129 for SIGHUP).
    fn exit_code(self) -> u8 {
        match self {
            Interrupt::Int => 130,
            Interrupt::Term => 143,
            Interrupt::Hup => 129,
        }
    }
}

impl Interrupt {
    /// The signal's name: `SIGINT`, `SIGTERM`, `SIGHUP`.
    fn name(self) -> &'static str {
        match self {
            Interrupt::Int => "SIGINT",
            Interrupt::Term => "SIGTERM",
            Interrupt::Hup => "SIGHUP",
        }
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP (see [`crate::steer::listen_for_signals`]).
pub(crate) fn listen(
    workspace: &Path,
    stop: StopToken,
    on_first: impl Fn(&'static str) + Send + 'static,
) -> std::io::Result<()> {
    let streams = [
        (Interrupt::Int, signal(SignalKind::interrupt())?),
        (Interrupt::Term, signal(SignalKind::terminate())?),
        (Interrupt::Hup, signal(SignalKind::hangup())?),
    ];
    let owner = crate::process::owner_of(workspace);
    tokio::spawn(async move {
        let mut streams = streams;
        let first = next(&mut streams).await;
        on_first(first.name());
        stop.stop_by_signal(first.name(), first.exit_code());
        next(&mut streams).await;
        // The person asked twice: no grace. Everything the runs started carries the
        // workspace's owner tag; kill it all now, then go.
        crate::process::sweep_owner(&owner);
        std::process::exit(i32::from(first.exit_code()));
    });
    Ok(())
}

/// The next of the three signals.
async fn next(streams: &mut [(Interrupt, Signal); 3]) -> Interrupt {
    let [(a, sa), (b, sb), (c, sc)] = streams;
    tokio::select! {
        _ = sa.recv() => *a,
        _ = sb.recv() => *b,
        _ = sc.recv() => *c,
    }
}
