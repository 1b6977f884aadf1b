//! Sealed JSON files: a whole-file record (a thread's `thread.json`, an agent run's
//! `run.json`) that tells what ralph wrote from any later change.
//!
//! ralph writes the record as pretty JSON whose last member is `"seal"`: the first 32 hex
//! digits of the SHA-256 of the JSON without it. A file edited in place by anyone else no
//! longer matches its seal. Beside each file ralph keeps the last version it wrote
//! (`<file>.last`), so that a file found changed can be put back, and so that a file found
//! without a seal where ralph sealed one before is not taken for one an earlier ralph wrote.
//!
//! Like the chain over `plan.jsonl`, the seal has no key: it stops accidents and an agent's
//! casual edit, not a forger who reads this and recomputes it.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::atomic;

/// Hex digits of a seal.
const HEX: usize = 32;

/// What comes between the record's last member and the seal's digits.
const KEY: &[u8] = b",\n  \"seal\": \"";

/// What ends a sealed file, after the digits.
const END: &[u8] = b"\"\n}";

/// How a sealed file reads.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Its seal matches: the record ralph last wrote. The JSON still holds the `seal`
    /// member, which readers ignore.
    Sealed(String),
    /// It has no seal and ralph never sealed it: written by an earlier ralph, taken as it is
    /// (its next write seals it).
    Unsealed(String),
    /// It is not what ralph wrote: why.
    Changed(String),
}

/// `json` (an object, as `serde_json::to_vec_pretty` writes it) sealed, with a final newline.
pub fn seal(json: &[u8]) -> Vec<u8> {
    let body = json.strip_suffix(b"\n}").unwrap_or(json);
    let mut out = Vec::with_capacity(json.len() + KEY.len() + HEX + END.len() + 1);
    out.extend_from_slice(body);
    out.extend_from_slice(KEY);
    out.extend_from_slice(&digest(body));
    out.extend_from_slice(END);
    out.push(b'\n');
    out
}

/// Writes `json` sealed to `path`, and the same bytes to its `.last` copy, each atomically.
///
/// # Errors
///
/// The I/O error, and the file it was about.
pub fn write(path: &Path, json: &[u8]) -> Result<(), (PathBuf, io::Error)> {
    let bytes = seal(json);
    atomic::replace(path, &bytes).map_err(|e| (path.to_path_buf(), e))?;
    let last = last(path);
    atomic::replace(&last, &bytes).map_err(|e| (last, e))
}

/// Reads `path` and checks its seal.
///
/// # Errors
///
/// The I/O error of reading it.
pub fn read(path: &Path) -> io::Result<Read> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let Some((body, digits)) = split(trimmed) else {
        return Ok(match last(path).exists() {
            true => Read::Changed("its seal is gone, though ralph sealed it".into()),
            false => Read::Unsealed(text),
        });
    };
    Ok(match digest(body) == digits {
        true => Read::Sealed(text),
        false => Read::Changed("it does not match its seal".into()),
    })
}

/// The last version ralph wrote of `path`, if it kept one.
///
/// # Errors
///
/// The I/O error of reading it (a missing copy is `None`).
pub fn last_written(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(last(path)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where the last version ralph wrote of `path` is kept.
pub fn last(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".last");
    PathBuf::from(name)
}

/// The sealed file's body (without its seal) and its digits; `None` when it has no seal.
fn split(bytes: &[u8]) -> Option<(&[u8], [u8; HEX])> {
    let rest = bytes.strip_suffix(END)?;
    let at = rest.len().checked_sub(HEX)?;
    let (head, digits) = rest.split_at(at);
    let body = head.strip_suffix(KEY)?;
    Some((body, digits.try_into().ok()?))
}

fn digest(body: &[u8]) -> [u8; HEX] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let hash = Sha256::digest(body);
    let mut hex = [0; HEX];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(hash.iter()) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pretty(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec_pretty(&value).unwrap()
    }

    #[test]
    fn a_sealed_file_reads_back_and_an_edit_breaks_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("thread.json");
        write(
            &path,
            &pretty(serde_json::json!({"phase": "Running", "n": 1})),
        )
        .unwrap();
        let Read::Sealed(text) = read(&path).unwrap() else {
            panic!("sealed")
        };
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["phase"], "Running");
        assert_eq!(value["seal"].as_str().unwrap().len(), HEX);

        std::fs::write(&path, text.replace("Running", "Done")).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Read::Changed("it does not match its seal".into())
        );
        std::fs::write(&path, "{\"phase\": \"Done\"}\n").unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Read::Changed("its seal is gone, though ralph sealed it".into())
        );
        assert!(last_written(&path).unwrap().unwrap().starts_with(b"{"));
    }

    #[test]
    fn a_file_ralph_never_sealed_is_taken_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        std::fs::write(&path, "{\"id\": \"x\"}\n").unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Read::Unsealed("{\"id\": \"x\"}\n".into())
        );
    }
}
