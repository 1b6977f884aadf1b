//! Files that must survive a crash or be held by one process: atomic replacement,
//! append-only journals, seals and exclusive lock files, and folders of ralph's own that keep out of `git status`. Used by
//! every store and by the runtime's workspace lock.

pub(crate) mod atomic;
pub(crate) mod capped;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod own;
#[cfg(feature = "threads")]
pub(crate) mod seal;
pub(crate) mod seen;
#[cfg(any(feature = "specs", feature = "threads"))]
pub(crate) mod watch;

pub(crate) use lock::{FolderLock, LockError, LockFile};
