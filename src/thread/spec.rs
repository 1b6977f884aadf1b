//! A thread's spec: markdown with a promise tag and acceptance criteria.
//!
//! # The form
//!
//! * **Promise tag**: a line that is exactly `<promise>TAG</promise>` (surrounding spaces
//!   ignored). `TAG` is what the model must print, alone, as the last non-empty line of its
//!   final answer to claim it is done (the rules of [`signal`](crate::signal): a tag in prose,
//!   in a code fence, in tool output or in an earlier turn does not count).
//! * **Acceptance criteria**: `- [ ]` (or `- [x]`) items under a heading named
//!   `Acceptance Criteria` (any level). The section ends at the next heading of the same or
//!   a higher level. A criterion whose text ends with a command in backticks after a colon
//!   (``- [ ] tests pass: `cargo test` ``) is checked by running that command in a shell;
//!   any other criterion is judged by a read-only verifier agent.
//!
//! ```
//! use ralph::thread::spec::ThreadSpec;
//!
//! let spec = ThreadSpec::parse("# Greeter\n<promise>DONE</promise>\n\n## Acceptance Criteria\n\
//!     - [ ] greets: `grep -q hello hello.txt`\n- [ ] the greeting is friendly\n")?;
//! assert_eq!(spec.promise, "DONE");
//! assert_eq!(spec.criteria[0].command.as_deref(), Some("grep -q hello hello.txt"));
//! assert_eq!(spec.criteria[1].command, None);
//! # Ok::<(), ralph::thread::spec::SpecError>(())
//! ```

use serde::{Deserialize, Serialize};

/// What a valid thread spec holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ThreadSpec {
    /// The tag the model prints as its final line when done.
    pub promise: String,
    /// The acceptance criteria, in order.
    pub criteria: Vec<Criterion>,
}

/// One acceptance criterion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Criterion {
    /// The text after `- [ ] ` (the command included, as written).
    pub text: String,
    /// The shell command that checks it, if it names one.
    pub command: Option<String>,
    /// 1-based line in the spec.
    pub line: usize,
}

/// Why a spec is not valid. Each message names the line where there is one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// No `<promise>TAG</promise>` line.
    #[error(
        "the spec has no promise tag: add a line `<promise>DONE</promise>` naming what the model prints when done"
    )]
    NoPromise,
    /// A promise line with an empty tag.
    #[error("line {0}: the promise tag is empty")]
    EmptyPromise(usize),
    /// No `Acceptance Criteria` heading.
    #[error("the spec has no `## Acceptance Criteria` section")]
    NoCriteriaSection,
    /// The section has no `- [ ]` items.
    #[error("line {0}: the Acceptance Criteria section has no `- [ ]` items")]
    NoCriteria(usize),
    /// A line of the section that is neither a criterion nor prose.
    #[error("line {line}: cannot parse acceptance criterion {text:?}: {why}")]
    BadCriterion {
        /// 1-based line.
        line: usize,
        /// The line, trimmed.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
}

impl ThreadSpec {
    /// Parses and validates a spec.
    ///
    /// # Errors
    ///
    /// [`SpecError`] saying what is missing or which line is wrong.
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let promise = promise(text)?;
        let criteria = criteria(text)?;
        Ok(ThreadSpec { promise, criteria })
    }
}

fn promise(text: &str) -> Result<String, SpecError> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(tag) = line
            .strip_prefix("<promise>")
            .and_then(|rest| rest.strip_suffix("</promise>"))
        {
            let tag = tag.trim();
            if tag.is_empty() {
                return Err(SpecError::EmptyPromise(i + 1));
            }
            return Ok(tag.to_owned());
        }
    }
    Err(SpecError::NoPromise)
}

/// `(level, title)` of a markdown heading line.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    let rest = &line[level..];
    (level > 0 && (rest.is_empty() || rest.starts_with(' '))).then(|| (level, rest.trim()))
}

fn criteria(text: &str) -> Result<Vec<Criterion>, SpecError> {
    let mut section: Option<(usize, usize)> = None; // (heading level, heading line)
    let mut found = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some((level, title)) = heading(line) {
            match section {
                Some((open, _)) if level <= open => break,
                None if title.eq_ignore_ascii_case("acceptance criteria") => {
                    section = Some((level, i + 1));
                    continue;
                }
                _ => {}
            }
        }
        if section.is_some()
            && !line.is_empty()
            && let Some(c) = criterion(line, i + 1)?
        {
            found.push(c);
        }
    }
    match section {
        None => Err(SpecError::NoCriteriaSection),
        Some((_, line)) if found.is_empty() => Err(SpecError::NoCriteria(line)),
        Some(_) => Ok(found),
    }
}

/// One line of the criteria section: a criterion, prose (`None`), or an error for a list
/// item that looks like a criterion but is not one.
fn criterion(line: &str, number: usize) -> Result<Option<Criterion>, SpecError> {
    let bad = |why| SpecError::BadCriterion {
        line: number,
        text: line.to_owned(),
        why,
    };
    let Some(item) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) else {
        return Ok(None);
    };
    let body = ["[ ] ", "[x] ", "[X] "]
        .iter()
        .find_map(|box_| item.strip_prefix(box_))
        .ok_or_else(|| bad("a criterion is a `- [ ] ` checkbox item"))?
        .trim();
    if body.is_empty() {
        return Err(bad("the criterion is empty"));
    }
    Ok(Some(Criterion {
        text: body.to_owned(),
        command: command(body).map_err(bad)?,
        line: number,
    }))
}

/// The command of ``text: `cmd` `` (the last backtick span, when it ends the text after a
/// colon).
fn command(body: &str) -> Result<Option<String>, &'static str> {
    let Some(before) = body.strip_suffix('`') else {
        return Ok(None);
    };
    let Some(open) = before.rfind('`') else {
        return Err("unbalanced backticks");
    };
    if !before[..open].trim_end().ends_with(':') {
        return Ok(None);
    }
    let cmd = before[open + 1..].trim();
    if cmd.is_empty() {
        return Err("the command in backticks is empty");
    }
    Ok(Some(cmd.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "# T\n<promise>SHIPPED</promise>\n";

    #[test]
    fn parses_criteria_until_the_next_heading() {
        let spec = ThreadSpec::parse(&format!(
            "{HEAD}## Acceptance Criteria\nSome prose.\n- [ ] a: `true`\n- [x] b\n### Detail\n- [ ] c\n## Notes\n- [ ] not a criterion\n"
        ))
        .unwrap();
        assert_eq!(spec.promise, "SHIPPED");
        let texts: Vec<_> = spec.criteria.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["a: `true`", "b", "c"]);
        assert_eq!(spec.criteria[0].line, 5);
    }

    #[test]
    fn inline_code_without_colon_is_text() {
        let spec = ThreadSpec::parse(&format!(
            "{HEAD}## Acceptance Criteria\n- [ ] the `greet` function exists\n"
        ))
        .unwrap();
        assert_eq!(spec.criteria[0].command, None);
    }

    #[test]
    fn errors_name_the_line() {
        let no_promise = ThreadSpec::parse("## Acceptance Criteria\n- [ ] a\n").unwrap_err();
        assert_eq!(no_promise, SpecError::NoPromise);
        let none = ThreadSpec::parse(&format!("{HEAD}## Acceptance Criteria\n\n")).unwrap_err();
        assert_eq!(
            none.to_string(),
            "line 3: the Acceptance Criteria section has no `- [ ]` items"
        );
        let bad =
            ThreadSpec::parse(&format!("{HEAD}## Acceptance Criteria\n- works\n")).unwrap_err();
        assert!(bad.to_string().starts_with("line 4: cannot parse"), "{bad}");
        let empty_cmd =
            ThreadSpec::parse(&format!("{HEAD}## Acceptance Criteria\n- [ ] x: ``\n")).unwrap_err();
        assert!(empty_cmd.to_string().contains("empty"), "{empty_cmd}");
        assert_eq!(
            ThreadSpec::parse("# T\n").unwrap_err(),
            SpecError::NoPromise
        );
        assert_eq!(
            ThreadSpec::parse(HEAD).unwrap_err(),
            SpecError::NoCriteriaSection
        );
    }
}
