//! SentencePiece BPE as llama.cpp runs it on `tokenizer.ggml.model = "llama"`
//! vocabularies: start from single characters and repeatedly merge the
//! adjacent pair whose concatenation is the vocabulary entry with the highest
//! score (ties to the leftmost pair). Pieces left that are not vocabulary
//! entries are spelled with byte tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Greater = popped first: higher score, then smaller left index.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Split `text` into byte ranges; `lookup` gives the id and score of a
/// vocabulary entry. Returns the final pieces (start, len) in order.
pub fn segment(text: &str, lookup: impl Fn(&str) -> Option<(u32, f32)>) -> Vec<(usize, usize)> {
    let mut syms: Vec<Sym> = text
        .char_indices()
        .map(|(start, c)| Sym {
            start,
            len: c.len_utf8(),
            prev: None,
            next: None,
        })
        .collect();
    let n = syms.len();
    for i in 0..n {
        syms[i].prev = i.checked_sub(1);
        syms[i].next = if i + 1 < n { Some(i + 1) } else { None };
    }
    let mut heap = BinaryHeap::new();
    let try_add = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], left: usize, right: usize| {
        let start = syms[left].start;
        let size = syms[left].len + syms[right].len;
        if let Some((_, score)) = lookup(&text[start..start + size]) {
            heap.push(Bigram {
                score,
                left,
                right,
                size,
            });
        }
    };
    for i in 1..n {
        try_add(&mut heap, &syms, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (syms[b.left], syms[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        syms[b.left].len += r.len;
        syms[b.right].len = 0;
        syms[b.left].next = r.next;
        if let Some(nx) = r.next {
            syms[nx].prev = Some(b.left);
        }
        if let Some(pv) = syms[b.left].prev {
            try_add(&mut heap, &syms, pv, b.left);
        }
        if let Some(nx) = syms[b.left].next {
            try_add(&mut heap, &syms, b.left, nx);
        }
    }
    let mut out = Vec::new();
    let mut i = if n > 0 { Some(0) } else { None };
    while let Some(k) = i {
        if syms[k].len > 0 {
            out.push((syms[k].start, syms[k].len));
        }
        i = syms[k].next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_score_merges_first() {
        let vocab = [("▁a", -1.0f32), ("ab", -0.5), ("▁ab", -2.0), ("b", -3.0)];
        let lookup = |s: &str| {
            vocab
                .iter()
                .position(|(t, _)| *t == s)
                .map(|i| (i as u32, vocab[i].1))
        };
        // "▁ab": "ab" (-0.5) beats "▁a" (-1.0), then "▁"+"ab" -> "▁ab".
        let out = segment("▁ab", lookup);
        assert_eq!(out, [(0, "▁ab".len())]);
        // "▁c": no pair is in the vocabulary: single characters stay.
        assert_eq!(segment("▁c", lookup), [(0, 3), (3, 1)]);
    }
}
