//! Inputs for property tests of what reads lines: arbitrary bytes, cut into arbitrary
//! reads. Shared with ralph's stream parser's property tests (the `proptest` feature).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};

/// An `AsyncRead` that hands out its bytes in the reads given, each at most the buffer.
#[derive(Debug)]
pub struct Reads(pub VecDeque<Vec<u8>>);

impl AsyncRead for Reads {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut front) = self.0.pop_front() {
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            if n < front.len() {
                self.0.push_front(front.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// `bytes` cut at `cuts` (offsets, in any order).
pub fn reads(bytes: &[u8], cuts: &[usize]) -> Reads {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = VecDeque::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        if cut > at {
            out.push_back(bytes[at..cut].to_vec());
            at = cut;
        }
    }
    Reads(out)
}

/// Bytes rich in newlines, long runs and JSON-ish text.
pub fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"x\"}\n".to_vec()),
        Just(b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n".to_vec()),
        (1usize..300).prop_map(|n| vec![b'a'; n]),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}
