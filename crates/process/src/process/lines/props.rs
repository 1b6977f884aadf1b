//! Property tests of the line reader and splitter: arbitrary bytes, cut into arbitrary reads,
//! never panic either; the memory stays within the cap; the lines handed out, put back
//! together, are the input, whether read or pushed.

use proptest::prelude::*;

use super::strategies::{reads, stream_bytes};
use super::{CHUNK, LineReader, LineSplitter, Piece};

fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(fut)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn lines_put_back_together_are_the_input_whatever_the_reads(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
        cap in 1usize..64,
    ) {
        let (rebuilt, max_buffer, teed) = run(async {
            let mut teed = Vec::new();
            let mut lines = LineReader::new(reads(&bytes, &cuts)).max_line(cap).tee(&mut teed);
            let mut rebuilt = Vec::new();
            let mut max_buffer = 0;
            while let Some(piece) = lines.next().await.expect("reads") {
                match piece {
                    Piece::Line(line) => {
                        assert!(line.len() <= cap, "a whole line is at most the cap");
                        rebuilt.extend_from_slice(line);
                        rebuilt.push(b'\n');
                    }
                    Piece::Part(part) => rebuilt.extend_from_slice(part),
                    Piece::LastPart(part) => {
                        rebuilt.extend_from_slice(part);
                        rebuilt.push(b'\n');
                    }
                }
                max_buffer = max_buffer.max(lines.buffer_capacity());
            }
            drop(lines);
            (rebuilt, max_buffer, teed)
        });
        // Every line came back with its newline; the input's last line may have lacked one.
        let mut expected = bytes.clone();
        if !expected.is_empty() && expected.last() != Some(&b'\n') {
            expected.push(b'\n');
        }
        prop_assert_eq!(rebuilt, expected);
        prop_assert_eq!(teed, bytes);
        prop_assert!(max_buffer <= cap + 2 * CHUNK, "buffer {max_buffer} for cap {cap}");
    }

    #[test]
    fn pushed_reads_split_as_the_reader_splits_them(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
        cap in 1usize..64,
    ) {
        let read = run(async {
            let mut lines = LineReader::new(reads(&bytes, &cuts)).max_line(cap);
            let mut all = Vec::new();
            while let Some(piece) = lines.next().await.expect("reads") {
                all.push(owned(piece));
            }
            all
        });
        let mut splitter = LineSplitter::new(cap);
        let mut pushed = Vec::new();
        let mut largest = 0;
        for chunk in reads(&bytes, &cuts).0 {
            splitter.push(&chunk);
            while let Some(piece) = splitter.next() {
                pushed.push(owned(piece));
            }
            largest = largest.max(splitter.buffer_capacity());
        }
        if let Some(piece) = splitter.rest() {
            pushed.push(owned(piece));
        }
        // The reader may hand out an oversized line in other parts: compare the lines.
        prop_assert_eq!(rejoin(&pushed), rejoin(&read));
        prop_assert!(largest <= cap + 2 * CHUNK, "buffer {largest} for cap {cap}");
    }
}

/// A piece, owned: `(whole line?, bytes, ends its line?)`.
fn owned(piece: Piece<'_>) -> (bool, Vec<u8>, bool) {
    match piece {
        Piece::Line(b) => (true, b.to_vec(), true),
        Piece::Part(b) => (false, b.to_vec(), false),
        Piece::LastPart(b) => (false, b.to_vec(), true),
    }
}

/// The lines the pieces make, each marked whole or oversized.
fn rejoin(pieces: &[(bool, Vec<u8>, bool)]) -> Vec<(bool, Vec<u8>)> {
    let mut lines = Vec::new();
    let mut current = Vec::new();
    for (whole, bytes, ends) in pieces {
        current.extend_from_slice(bytes);
        if *ends {
            lines.push((*whole, std::mem::take(&mut current)));
        }
    }
    lines
}
