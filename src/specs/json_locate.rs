//! Finds where a value sits in a JSON text, for error messages: serde keeps no positions,
//! so a problem found after parsing (a repeated id) is located by walking the text again.
//!
//! The walk is a small scanner over a text serde_json already accepted; on anything it does
//! not expect it gives up (`None`) rather than guess.

/// One step of a path into a JSON document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathStep {
    /// The member with this key of an object (the first one, should the key repeat).
    Key(&'static str),
    /// The element at this index of an array.
    Index(usize),
}

/// The byte offset of the value at `path` in `text`, or `None` when there is none.
pub(crate) fn find(text: &str, path: &[PathStep]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut pos = skip_ws(bytes, 0);
    for step in path {
        pos = match *step {
            PathStep::Key(key) => member(text, pos, key)?,
            PathStep::Index(index) => element(bytes, pos, index)?,
        };
    }
    Some(pos)
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |at| at + 1);
    (line, before[start..].chars().count() + 1)
}

/// In the object at `pos`: the offset of the value of `key`.
fn member(text: &str, pos: usize, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    expect(bytes, pos, b'{')?;
    let mut at = skip_ws(bytes, pos + 1);
    if bytes.get(at) == Some(&b'}') {
        return None;
    }
    loop {
        let end = string_end(bytes, at)?;
        // Decoded, so a key written with escapes still matches.
        let name: String = serde_json::from_str(text.get(at..end)?).ok()?;
        let colon = skip_ws(bytes, end);
        expect(bytes, colon, b':')?;
        let value = skip_ws(bytes, colon + 1);
        if name == key {
            return Some(value);
        }
        at = next_item(bytes, skip_value(bytes, value)?)?;
    }
}

/// In the array at `pos`: the offset of element `index`.
fn element(bytes: &[u8], pos: usize, index: usize) -> Option<usize> {
    expect(bytes, pos, b'[')?;
    let mut at = skip_ws(bytes, pos + 1);
    if bytes.get(at) == Some(&b']') {
        return None;
    }
    for _ in 0..index {
        at = next_item(bytes, skip_value(bytes, at)?)?;
    }
    Some(at)
}

/// After an item ending at `pos`: the start of the next one; `None` at the container's end.
fn next_item(bytes: &[u8], pos: usize) -> Option<usize> {
    let at = skip_ws(bytes, pos);
    expect(bytes, at, b',')?;
    Some(skip_ws(bytes, at + 1))
}

/// The offset just past the value starting at `pos`.
fn skip_value(bytes: &[u8], pos: usize) -> Option<usize> {
    match bytes.get(pos)? {
        b'"' => string_end(bytes, pos),
        open @ (b'{' | b'[') => {
            let close = if *open == b'{' { b'}' } else { b']' };
            let mut at = skip_ws(bytes, pos + 1);
            if bytes.get(at) == Some(&close) {
                return Some(at + 1);
            }
            loop {
                if *open == b'{' {
                    at = skip_ws(bytes, string_end(bytes, at)?);
                    expect(bytes, at, b':')?;
                    at = skip_ws(bytes, at + 1);
                }
                at = skip_ws(bytes, skip_value(bytes, at)?);
                match bytes.get(at)? {
                    b',' => at = skip_ws(bytes, at + 1),
                    c if *c == close => return Some(at + 1),
                    _ => return None,
                }
            }
        }
        // A number, true, false or null: up to the next delimiter.
        _ => Some(
            bytes[pos..]
                .iter()
                .position(|c| matches!(c, b',' | b']' | b'}') || c.is_ascii_whitespace())
                .map_or(bytes.len(), |n| pos + n),
        ),
    }
}

/// The offset just past the string starting at `pos` (its opening quote).
fn string_end(bytes: &[u8], pos: usize) -> Option<usize> {
    expect(bytes, pos, b'"')?;
    let mut at = pos + 1;
    loop {
        match bytes.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

fn expect(bytes: &[u8], pos: usize, want: u8) -> Option<()> {
    (bytes.get(pos) == Some(&want)).then_some(())
}

fn skip_ws(bytes: &[u8], pos: usize) -> usize {
    let mut at = pos;
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::PathStep::{Index, Key};
    use super::*;

    const TEXT: &str = "{\"x\": [1, {\"id\": \"no\"}, \"a\\\"]\"],\n \"specs\": [\n  {\"id\": \"a\", \"tasks\": []},\n  {\"n\": {\"id\": 2}, \"i\\u0064\": \"b\",\n   \"tasks\": [{\"id\": \"b-1\"}]}\n]}";

    fn at(path: &[PathStep]) -> Option<(usize, usize)> {
        find(TEXT, path).map(|o| line_column(TEXT, o))
    }

    #[test]
    fn finds_values_past_nested_values_strings_and_escaped_keys() {
        assert_eq!(at(&[Key("specs"), Index(0), Key("id")]), Some((3, 10)));
        assert_eq!(at(&[Key("specs"), Index(1), Key("id")]), Some((4, 31)));
        let task = [Key("specs"), Index(1), Key("tasks"), Index(0), Key("id")];
        assert_eq!(at(&task), Some((5, 21)));
    }

    #[test]
    fn a_path_that_is_not_there_is_none() {
        assert_eq!(at(&[Key("specs"), Index(2)]), None);
        assert_eq!(at(&[Key("specs"), Index(0), Key("tasks"), Index(0)]), None);
        assert_eq!(at(&[Key("nope")]), None);
        assert_eq!(find("[1, 2", &[Index(3)]), None);
        assert_eq!(find("{\"a\": \"unterminated", &[Key("b")]), None);
    }
}
