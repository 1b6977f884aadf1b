//! Files that must survive a crash or be held by one process: atomic replacement,
//! append-only journals, seals, slots rewritten in place and exclusive lock files, and
//! folders of ralph's own that keep out of `git status`. Every state file ralph writes is
//! written here (`src/layers.rs` checks it); used by every store, the spend ledger, the
//! threads and the runtime's workspace lock.

pub(crate) mod atomic;
pub(crate) mod capped;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod own;
#[cfg(feature = "threads")]
pub(crate) mod seal;
pub(crate) mod seen;
pub(crate) mod slot;
#[cfg(any(feature = "specs", feature = "threads"))]
pub(crate) mod watch;

pub(crate) use lock::{FolderLock, LockError, LockFile};
