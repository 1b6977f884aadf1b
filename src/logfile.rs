//! Bounded log excerpts. Placeholder.
use std::fmt;
use std::path::Path;

/// The head and tail of a log.
#[derive(Debug)]
pub struct Excerpt {
    text: String,
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Reads the first `head` and last `tail` lines of `path`.
///
/// # Errors
///
/// When the file cannot be read.
pub fn excerpt(path: &Path, head: usize, tail: usize) -> std::io::Result<Excerpt> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = text.lines().collect();
    let text = if lines.len() <= head + tail {
        lines.join("\n")
    } else {
        format!(
            "{}\n[… {} lines omitted …]\n{}",
            lines[..head].join("\n"),
            lines.len() - head - tail,
            lines[lines.len() - tail..].join("\n")
        )
    };
    Ok(Excerpt { text })
}
