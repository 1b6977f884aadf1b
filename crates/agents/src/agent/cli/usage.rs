//! The file a command agent may report its usage in: ralph names it in the command's
//! environment (`RALPH_USAGE_FILE`), the command writes one JSON object there, and ralph
//! reads it after the run, so that its tokens and dollars reach the ledger and the budgets.
//!
//! Each run gets a fresh folder of its own in the temporary folder, made by ralph before
//! the run and removed after it. The file lies in that folder, not in the log folder: the
//! sandbox keeps ralph's files (its logs among them) read-only, and gives the command this
//! one folder writable instead (bound over its private, empty `/tmp` when the folder lies
//! there).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use crate::agent::{AgentError, AgentRun};

/// The variable that names the file, in the command's environment.
pub use crate::config::USAGE_FILE_VAR;

/// The most of the file ralph reads: a usage object is a few dozen bytes, and a command
/// that writes more must not make ralph hold it.
const MOST: u64 = 64 * 1024;

/// The usage file of one run: its own folder, removed when this is dropped.
#[derive(Debug)]
pub(super) struct UsageFile {
    dir: PathBuf,
}

/// What a command may write: the fields of a ledger line's spend, each optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reported {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_tokens: u64,
    #[serde(default)]
    cache_creation_tokens: u64,
    #[serde(default)]
    cost_usd: Option<f64>,
}

impl UsageFile {
    /// A fresh folder for the file (only ralph's user may enter it), named after this
    /// process and a counter so that runs at once never share one.
    pub(super) fn create() -> Result<UsageFile, AgentError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ralph-usage-{}-{n}", std::process::id()));
        // A folder left by a killed ralph of the same pid goes: its file is no report of ours.
        let _ = std::fs::remove_dir_all(&dir);
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&dir)
            .map_err(|source| AgentError::Io {
                path: dir.clone(),
                source,
            })?;
        Ok(UsageFile { dir })
    }

    /// The folder the command must be able to write.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file the variable names.
    pub(super) fn path(&self) -> PathBuf {
        self.dir.join("usage.json")
    }

    /// Sets on `run` what the command reported, if it wrote the file: its tokens, and its
    /// dollars when it gave them. A file ralph cannot use leaves `run` as it is and is
    /// returned as a warning that names the file and what is wrong with it.
    pub(super) fn apply(&self, run: &mut AgentRun) -> Result<(), String> {
        let path = self.path();
        let reported = read(&path).map_err(|why| {
            format!(
                "the usage file {} ({USAGE_FILE_VAR}) {why}; the run's usage is not counted, \
                 its answer stands (write one JSON object such as \
                 {{\"input_tokens\": 1200, \"output_tokens\": 300, \"cost_usd\": 0.05}})",
                path.display()
            )
        })?;
        if let Some(reported) = reported {
            run.usage.input_tokens = reported.input_tokens;
            run.usage.output_tokens = reported.output_tokens;
            run.usage.cache_read_tokens = reported.cache_read_tokens;
            run.usage.cache_creation_tokens = reported.cache_creation_tokens;
            run.cost_usd = reported.cost_usd;
        }
        Ok(())
    }
}

impl Drop for UsageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The report in the file at `path`: `None` when the command wrote none (no file, or only
/// white space), else the object, or why it cannot be used.
fn read(path: &Path) -> Result<Option<Reported>, String> {
    // Not followed: a link or a pipe the command left there is not read.
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if !meta.is_file() {
        return Err("is not a regular file".to_owned());
    }
    if meta.len() > MOST {
        return Err(format!(
            "holds {} bytes, more than the {} KiB a report may take",
            meta.len(),
            MOST / 1024
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MOST).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let reported: Reported =
        serde_json::from_slice(&bytes).map_err(|e| format!("is not a usage object: {e}"))?;
    match reported.cost_usd {
        Some(cost) if !cost.is_finite() || cost < 0.0 => {
            Err(format!("gives cost_usd = {cost}, not a sum of dollars"))
        }
        _ => Ok(Some(reported)),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;
    use crate::agent::AgentExit;

    fn applied(content: &[u8]) -> (AgentRun, Result<(), String>) {
        let file = UsageFile::create().unwrap();
        std::fs::write(file.path(), content).unwrap();
        let mut run = AgentRun::new(AgentExit::Completed);
        let result = file.apply(&mut run);
        (run, result)
    }

    #[test]
    fn every_field_is_optional_and_each_reaches_the_run() {
        let (run, result) = applied(
            br#"{"input_tokens": 1200, "output_tokens": 300, "cache_read_tokens": 7,
                 "cache_creation_tokens": 9, "cost_usd": 0.05}"#,
        );
        assert_eq!(result, Ok(()));
        let usage = &run.usage;
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (1200, 300),
            "{usage:?}"
        );
        assert_eq!(
            (usage.cache_read_tokens, usage.cache_creation_tokens),
            (7, 9)
        );
        assert_eq!(run.cost_usd, Some(0.05));
        let (run, result) = applied(b"{\"output_tokens\": 5}\n");
        assert_eq!(result, Ok(()));
        assert_eq!((run.usage.output_tokens, run.cost_usd), (5, None));
    }

    #[test]
    fn a_file_not_written_or_blank_reports_nothing() {
        let file = UsageFile::create().unwrap();
        let mut run = AgentRun::new(AgentExit::Completed);
        assert_eq!(file.apply(&mut run), Ok(()));
        assert_eq!(run.usage.input_tokens, 0);
        assert_eq!(applied(b" \n").1, Ok(()));
    }

    #[test]
    fn a_file_ralph_cannot_use_is_named_with_what_is_wrong() {
        for (content, why) in [
            (&b"tokens: 5"[..], "is not a usage object"),
            (b"{\"input_token\": 5}", "unknown field `input_token`"),
            (b"{\"input_tokens\": -5}", "is not a usage object"),
            (b"{\"cost_usd\": -1.0}", "gives cost_usd = -1"),
        ] {
            let (run, result) = applied(content);
            let warning = result.unwrap_err();
            assert!(
                warning.contains("usage.json") && warning.contains(why),
                "{warning}"
            );
            assert_eq!(run.usage.input_tokens, 0);
        }
        let (_, result) = applied(&vec![b' '; 65 * 1024]);
        assert!(result.unwrap_err().contains("more than the 64 KiB"));
    }

    #[test]
    fn the_folder_goes_with_the_file() {
        let file = UsageFile::create().unwrap();
        let dir = file.dir().to_path_buf();
        std::fs::write(file.path(), "{}").unwrap();
        drop(file);
        assert!(!dir.exists());
    }
}
