//! The chain that tells `plan.jsonl`'s lines written by ralph from any other.
//!
//! Every line ralph writes ends in a last field `"h"`: the first 32 hex digits of the
//! SHA-256 of the previous line's `h` (its ASCII hex; nothing for the file's first line), a
//! newline, and the line's JSON object without its `h`. A line appended, edited or removed
//! by anyone else breaks the chain at that line.
//!
//! The chain has no key: it stops accidents and an agent's casual edit, not a forger who
//! reads this and recomputes it.
//!
//! The field is always the object's last, so it is written by inserting `,"h":"…"` before
//! the closing `}` of what serde wrote, and read by slicing a suffix of fixed length off the
//! line: neither side serializes anything twice.

use sha2::{Digest, Sha256};

/// Hex digits of a link: the first 128 bits of the SHA-256.
const HEX: usize = 32;

/// What comes between the object's last value and the link.
const KEY: &[u8] = br#","h":""#;

/// What ends a signed line (before its newline).
const END: &[u8] = br#""}"#;

/// The length of the suffix `,"h":"…"}` that ends a signed line, in bytes.
const SUFFIX: usize = KEY.len() + HEX + END.len();

/// A line's `h`, as the ASCII hex digits written in the file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link([u8; HEX]);

impl Link {
    /// The link of the line whose object, without its `h`, is `head` followed by `}`,
    /// after the line linked `prev` (`None` for the file's first line).
    pub(crate) fn of(prev: Option<&Link>, head: &[u8]) -> Link {
        let mut hasher = Sha256::new();
        if let Some(prev) = prev {
            hasher.update(prev.0);
        }
        hasher.update(b"\n");
        hasher.update(head);
        hasher.update(b"}");
        let digest = hasher.finalize();
        let mut hex = [0; HEX];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(digest.iter()) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        Link(hex)
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only ever ASCII hex digits.
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// A line (without its newline) cut into the head of its object (everything before `,"h"`)
/// and its link; `None` when the line does not end in a link.
pub(crate) fn split(line: &[u8]) -> Option<(&[u8], Link)> {
    let at = line.len().checked_sub(SUFFIX)?;
    let (head, suffix) = line.split_at(at);
    let digits = suffix.strip_prefix(KEY)?.strip_suffix(END)?;
    let hex: [u8; HEX] = digits.try_into().ok()?;
    // A range check, not a search of DIGITS: this runs for every line of every load.
    let is_hex = hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    is_hex.then_some((head, Link(hex)))
}

/// Signs the one JSON object that `out[start..]` holds (no newline): its closing `}` becomes
/// `,"h":"…"}`. Returns the new link, or `None` (leaving `out` as it was) when there is no
/// object with a field there.
pub(crate) fn sign(out: &mut Vec<u8>, start: usize, prev: Option<&Link>) -> Option<Link> {
    let object = out.get(start..)?;
    if object.len() < 3 || object.first() != Some(&b'{') || object.last() != Some(&b'}') {
        return None;
    }
    out.pop();
    let link = Link::of(prev, &out[start..]);
    out.extend_from_slice(KEY);
    out.extend_from_slice(&link.0);
    out.extend_from_slice(END);
    Some(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(object: &str, prev: Option<&Link>) -> (Vec<u8>, Link) {
        let mut out = object.as_bytes().to_vec();
        let link = sign(&mut out, 0, prev).expect("an object");
        (out, link)
    }

    #[test]
    fn a_signed_line_splits_back_into_its_object_and_link() {
        let (line, link) = signed(r#"{"t":"task","id":"t-1"}"#, None);
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"t":"task","id":"t-1","h":""#),
            "{text}"
        );
        let (head, read) = split(&line).expect("signed");
        assert_eq!((head, read), (&br#"{"t":"task","id":"t-1""#[..], link));
        assert_eq!(Link::of(None, head), link);
        serde_json::from_slice::<serde_json::Value>(&line).expect("still JSON");
    }

    #[test]
    fn the_link_is_the_documented_hash() {
        // sha256("\n" + `{"t":"run"}`), first 16 bytes: what the module docs promise.
        let (_, first) = signed(r#"{"t":"run"}"#, None);
        let digest = Sha256::digest(b"\n{\"t\":\"run\"}");
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(format!("{first:?}"), hex);
        let (_, second) = signed(r#"{"t":"run"}"#, Some(&first));
        let digest = Sha256::digest(format!("{hex}\n{{\"t\":\"run\"}}").as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(format!("{second:?}"), hex);
    }

    #[test]
    fn each_link_depends_on_the_line_and_the_one_before() {
        let (_, a) = signed(r#"{"t":"task","s":"p"}"#, None);
        let (_, b) = signed(r#"{"t":"task","s":"a"}"#, None);
        let (_, c) = signed(r#"{"t":"task","s":"p"}"#, Some(&b));
        assert!(a != b && a != c);
    }

    #[test]
    fn lines_without_a_whole_link_do_not_split() {
        for line in [
            &br#"{"t":"task"}"#[..],
            br#"{"t":"task","h":"abc"}"#,
            br#"{"t":"task","h":"0123456789abcdef0123456789ABCDEF"}"#,
            br#"{"t":"task","h":"0123456789abcdef0123456789abcdef" }"#,
            b"",
        ] {
            assert!(split(line).is_none(), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn only_an_object_with_a_field_is_signed() {
        for text in ["", "{}", "[1]", "1"] {
            let mut out = text.as_bytes().to_vec();
            assert!(sign(&mut out, 0, None).is_none(), "{text}");
            assert_eq!(out, text.as_bytes());
        }
    }
}
