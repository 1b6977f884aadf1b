//! A part of `ralph-loop`, with no stability promise of its own: use `ralph-loop`.
//!
//! The foundation the rest of ralph stands on, with no ralph types in it:
//!
//! - [`process`]: every process ralph starts (an agent's CLI, a gate, a hook), supervised
//!   from spawn to sweep, confined by the sandbox seam, stopped by a [`StopToken`](process::StopToken);
//! - [`files`]: writes that are atomic or append-only with fsync, locks, seals;
//! - [`output`]: bounded buffers of what a process prints;
//! - [`logfile`]: the log files of runs;
//! - [`time`]: the clock's words.
//!
//! It depends on no other crate of ralph's, so nothing here can reach up into them:
//!
//! ```compile_fail
//! // The foundation cannot name the seams above it: ralph-loop-core is no dependency.
//! use ralph_loop_core::model::Task;
//! ```

pub mod files;
pub mod logfile;
pub mod output;
pub mod process;
pub mod time;
