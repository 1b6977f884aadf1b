//! Files that must survive a crash or be held by one process: atomic replacement,
//! append-only journals, seals, slots rewritten in place and exclusive lock files, and
//! folders of ralph's own that keep out of `git status`. Every state file ralph writes is
//! written here (the workspace's `clippy.toml` forbids the other ways of writing a file
//! everywhere else); used by every store, the spend ledger, the
//! threads and the runtime's workspace lock.

pub mod atomic;
pub mod capped;
pub mod journal;
pub mod lock;
pub mod own;
pub mod seal;
pub mod seen;
pub mod slot;
pub mod watch;

pub use lock::{FolderLock, LockError, LockFile};
