//! Byte-pair-encoding merges over one pre-tokenized word, in llama.cpp's
//! order: the adjacent pair with the lowest merge rank is merged first, ties
//! going to the leftmost pair, until no adjacent pair has a rank.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// One symbol of a word being merged: a byte range of the word and the
/// vocabulary id of that range, if it has one.
#[derive(Debug, Clone, Copy)]
pub struct Symbol {
    pub start: usize,
    pub len: usize,
    pub id: Option<u32>,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Symbol {
    pub fn new(start: usize, len: usize, id: Option<u32>) -> Self {
        Self {
            start,
            len,
            id,
            prev: None,
            next: None,
        }
    }
}

/// Merge table: (left id, right id) -> (rank, merged id).
pub type Merges = HashMap<(u32, u32), (u32, u32)>;

/// Run the merges on `symbols` (consecutive, in order) and return the
/// symbols left at the end, in order.
pub fn merge(mut symbols: Vec<Symbol>, merges: &Merges) -> Vec<Symbol> {
    let n = symbols.len();
    if n < 2 {
        return symbols;
    }
    for i in 0..n {
        symbols[i].prev = i.checked_sub(1);
        symbols[i].next = if i + 1 < n { Some(i + 1) } else { None };
    }
    // Min-heap on (rank, left index); each entry remembers the ids it was made
    // from so that entries outdated by an earlier merge are skipped.
    let mut heap: BinaryHeap<Reverse<(u32, usize, usize, u32, u32)>> = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<_>, symbols: &[Symbol], left: usize, right: usize| {
        if let (Some(l), Some(r)) = (symbols[left].id, symbols[right].id) {
            if let Some(&(rank, _)) = merges.get(&(l, r)) {
                heap.push(Reverse((rank, left, right, l, r)));
            }
        }
    };
    for i in 1..n {
        push(&mut heap, &symbols, i - 1, i);
    }
    while let Some(Reverse((_, left, right, l, r))) = heap.pop() {
        let (ls, rs) = (symbols[left], symbols[right]);
        if ls.len == 0
            || rs.len == 0
            || ls.next != Some(right)
            || ls.id != Some(l)
            || rs.id != Some(r)
        {
            continue;
        }
        let merged = merges[&(l, r)].1;
        symbols[left].len += rs.len;
        symbols[left].id = Some(merged);
        symbols[left].next = rs.next;
        symbols[right].len = 0;
        if let Some(nx) = rs.next {
            symbols[nx].prev = Some(left);
        }
        if let Some(pv) = symbols[left].prev {
            push(&mut heap, &symbols, pv, left);
        }
        if let Some(nx) = symbols[left].next {
            push(&mut heap, &symbols, left, nx);
        }
    }
    let mut out = Vec::new();
    let mut i = Some(0);
    while let Some(k) = i {
        if symbols[k].len > 0 {
            out.push(symbols[k]);
        }
        i = symbols[k].next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_rank_first_and_leftmost_on_ties() {
        // ids: a=0 b=1 ab=2 bb=3 abb=4
        let mut m = Merges::new();
        m.insert((1, 1), (0, 3)); // b b -> bb (rank 0)
        m.insert((0, 1), (1, 2)); // a b -> ab (rank 1)
        m.insert((0, 3), (2, 4)); // a bb -> abb (rank 2)
        let syms = |ids: &[u32]| {
            ids.iter()
                .enumerate()
                .map(|(i, &id)| Symbol::new(i, 1, Some(id)))
                .collect()
        };
        // "abb": bb merges first (rank 0), then a+bb.
        let out = merge(syms(&[0, 1, 1]), &m);
        assert_eq!(out.iter().map(|s| s.id.unwrap()).collect::<Vec<_>>(), [4]);
        // "bbb": two overlapping bb pairs of equal rank: the left one wins.
        let out = merge(syms(&[1, 1, 1]), &m);
        assert_eq!(
            out.iter()
                .map(|s| (s.start, s.id.unwrap()))
                .collect::<Vec<_>>(),
            [(0, 3), (2, 1)]
        );
    }
}
