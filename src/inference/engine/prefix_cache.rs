//! The prefix cache of one model: computed prompt prefixes shared by every
//! call, agent and run on that model, so a prompt that starts like one seen
//! before (the same system prompt, the same rules, an agent's previous vote
//! prompt) resumes there instead of recomputing.
//!
//! Design (a radix tree of fixed-size blocks, in the manner of vLLM's
//! automatic prefix caching and SGLang's radix attention):
//! - A prompt is cut into blocks of [`PrefixCache::block`] tokens from
//!   position 0. A node of the tree is one block; its identity is its
//!   parent and its own token ids, so a node stands for the whole prefix up
//!   to its end (same tokens, same positions, same values).
//! - A node holds the keys and values of its positions for every attention
//!   layer (copies, `[n_kv_head, block, head_dim]`), and, for models with
//!   recurrent layers, the recurrent states at its end when the sequence
//!   had a snapshot there (recurrent states cannot be cut back, so only such
//!   nodes are places to resume; generation snapshots at multiples of the
//!   snapshot interval, a multiple of the block).
//! - [`PrefixCache::restore`] walks the tree along a prompt and rebuilds a
//!   [`SeqState`] at the deepest node it can resume from;
//!   [`PrefixCache::insert`] adds the full blocks of a computed prompt.
//! - Memory: every node's bytes count against a budget; when over it, the
//!   least recently used leaf goes first (a node is used when a lookup or an
//!   insert passes through it, so parents are never older than children).
//!
//! Exactness: a node is only ever made from a state that computed exactly
//! its prefix, and is found only by an identical token prefix, so a restored
//! state holds what a recompute would compute (tested per architecture in
//! `tests/full/prefix_cache.rs`).

use std::collections::HashMap;

use candle_core::Tensor;

use crate::inference::engine::state::{KvCache, SeqState};

/// Keys and values of one block for every layer (`None` for layers without).
type KvBlock = Vec<Option<(Tensor, Tensor)>>;
/// Recurrent states of every layer at a block's end.
type RecStates = Vec<Option<Vec<Tensor>>>;

struct Node {
    parent: u64,
    key: Vec<u32>,
    kv: KvBlock,
    rec: Option<RecStates>,
    bytes: usize,
    last_used: u64,
    children: usize,
}

/// What the cache did so far (for benchmarks and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PrefixStats {
    /// Prompts looked up.
    pub lookups: u64,
    /// Prompt tokens restored from the cache.
    pub reused_tokens: u64,
    pub blocks_inserted: u64,
    pub blocks_evicted: u64,
    /// Blocks and bytes held now.
    pub blocks: u64,
    pub bytes: u64,
}

/// The prefix cache of one model (see the module docs).
pub struct PrefixCache {
    block: usize,
    budget: usize,
    bytes: usize,
    clock: u64,
    next_id: u64,
    nodes: HashMap<u64, Node>,
    /// (parent id, block tokens) → node id; the root is id 0.
    index: HashMap<(u64, Vec<u32>), u64>,
    stats: PrefixStats,
    /// How the cached keys and values are stored (that of the first state
    /// inserted); states that store them otherwise neither add nor restore.
    kv: Option<KvCache>,
}

fn tensor_bytes(t: &Tensor) -> usize {
    t.elem_count() * t.dtype().size_in_bytes()
}

impl PrefixCache {
    /// A cache of blocks of `block` tokens holding at most `budget` bytes.
    pub fn new(block: usize, budget: usize) -> Self {
        Self {
            block: block.max(1),
            budget,
            bytes: 0,
            clock: 0,
            next_id: 1,
            nodes: HashMap::new(),
            index: HashMap::new(),
            stats: PrefixStats::default(),
            kv: None,
        }
    }

    /// Tokens per block.
    pub fn block(&self) -> usize {
        self.block
    }

    pub fn stats(&self) -> PrefixStats {
        PrefixStats {
            blocks: self.nodes.len() as u64,
            bytes: self.bytes as u64,
            ..self.stats
        }
    }

    /// The nodes along `prompt` (full blocks, at most `limit` tokens), root first.
    fn path(&self, prompt: &[u32], limit: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut parent = 0u64;
        for b in 0..limit.min(prompt.len()) / self.block {
            let key = &prompt[b * self.block..(b + 1) * self.block];
            match self.index.get(&(parent, key.to_vec())) {
                Some(&id) => {
                    out.push(id);
                    parent = id;
                }
                None => break,
            }
        }
        out
    }

    /// How many leading tokens of `prompt` (at most `limit`) a state of this
    /// layout could resume from (`recurrent`: only at nodes with recurrent states).
    pub fn reach(&self, prompt: &[u32], limit: usize, recurrent: bool) -> usize {
        let path = self.path(prompt, limit);
        let depth = if recurrent {
            path.iter()
                .rposition(|id| self.nodes[id].rec.is_some())
                .map(|i| i + 1)
                .unwrap_or(0)
        } else {
            path.len()
        };
        depth * self.block
    }

    /// Rebuild `state` at the deepest cached prefix of `prompt` it can
    /// resume from (at most `limit` tokens), with room for `capacity`
    /// positions. Returns the positions restored (0: nothing cached, `state`
    /// untouched).
    pub fn restore(
        &mut self,
        state: &mut SeqState,
        prompt: &[u32],
        limit: usize,
        capacity: usize,
    ) -> candle_core::Result<usize> {
        self.stats.lookups += 1;
        if self.kv.is_some_and(|kv| kv != state.kv_cache()) {
            return Ok(0);
        }
        let recurrent = state.is_recurrent();
        let reach = self.reach(prompt, limit, recurrent);
        if reach == 0 {
            return Ok(0);
        }
        let path = self.path(prompt, reach);
        self.clock += 1;
        for id in &path {
            if let Some(n) = self.nodes.get_mut(id) {
                n.last_used = self.clock;
            }
        }
        let blocks: Vec<&[Option<(Tensor, Tensor)>]> =
            path.iter().map(|id| self.nodes[id].kv.as_slice()).collect();
        let rec = path.last().and_then(|id| self.nodes[id].rec.as_deref());
        state.restore_prefix(&prompt[..reach], &blocks, rec, capacity)?;
        self.stats.reused_tokens += reach as u64;
        Ok(reach)
    }

    /// Add the full blocks of `prompt` that `state` has computed (its tokens
    /// start with them), then evict down to the budget.
    pub fn insert(&mut self, state: &SeqState, prompt: &[u32]) -> candle_core::Result<()> {
        if self.budget == 0 || *self.kv.get_or_insert(state.kv_cache()) != state.kv_cache() {
            return Ok(());
        }
        let have = state.common_prefix(prompt);
        let recurrent = state.is_recurrent();
        self.clock += 1;
        let mut parent = 0u64;
        for b in 0..have / self.block {
            let (start, end) = (b * self.block, (b + 1) * self.block);
            let key = prompt[start..end].to_vec();
            let rec = if recurrent {
                state.recurrent_at(end)
            } else {
                None
            };
            let rec_bytes =
                |r: &RecStates| -> usize { r.iter().flatten().flatten().map(tensor_bytes).sum() };
            if let Some(&id) = self.index.get(&(parent, key.clone())) {
                let n = self.nodes.get_mut(&id).expect("indexed nodes exist");
                n.last_used = self.clock;
                if n.rec.is_none() {
                    if let Some(r) = rec {
                        let extra = rec_bytes(&r);
                        n.rec = Some(r);
                        n.bytes += extra;
                        self.bytes += extra;
                    }
                }
                parent = id;
                continue;
            }
            let Some(kv) = state.kv_range(start, self.block)? else {
                break;
            };
            let bytes = kv
                .iter()
                .flatten()
                .map(|(k, v)| tensor_bytes(k) + tensor_bytes(v))
                .sum::<usize>()
                + rec.as_ref().map(rec_bytes).unwrap_or(0);
            let id = self.next_id;
            self.next_id += 1;
            if let Some(p) = self.nodes.get_mut(&parent) {
                p.children += 1;
            }
            self.index.insert((parent, key.clone()), id);
            self.nodes.insert(
                id,
                Node {
                    parent,
                    key,
                    kv,
                    rec,
                    bytes,
                    last_used: self.clock,
                    children: 0,
                },
            );
            self.bytes += bytes;
            self.stats.blocks_inserted += 1;
            parent = id;
        }
        self.evict();
        Ok(())
    }

    /// Drop least recently used leaves until the cache fits its budget.
    fn evict(&mut self) {
        if self.bytes <= self.budget {
            return;
        }
        // Leaves, oldest first (ties by id: deterministic).
        let mut leaves: Vec<(u64, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.children == 0)
            .map(|(&id, n)| (n.last_used, id))
            .collect();
        leaves.sort_unstable();
        let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>> =
            leaves.into_iter().map(std::cmp::Reverse).collect();
        while self.bytes > self.budget {
            let Some(std::cmp::Reverse((_, id))) = heap.pop() else {
                break;
            };
            let Some(n) = self.nodes.remove(&id) else {
                continue;
            };
            self.index.remove(&(n.parent, n.key));
            self.bytes -= n.bytes;
            self.stats.blocks_evicted += 1;
            if let Some(p) = self.nodes.get_mut(&n.parent) {
                p.children -= 1;
                if p.children == 0 {
                    heap.push(std::cmp::Reverse((p.last_used, n.parent)));
                }
            }
        }
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.index.clear();
        self.bytes = 0;
        self.kv = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::engine::state::SlotKind;
    use candle_core::Device;

    /// A one-layer attention state whose key at position p is p.
    fn state_for(tokens: &[u32]) -> SeqState {
        let mut s = SeqState::attention_only(1, 1000);
        let n = tokens.len();
        let k = Tensor::arange(0f32, n as f32, &Device::Cpu)
            .unwrap()
            .reshape((1, n, 1))
            .unwrap();
        s.append_kv(0, &k, &k).unwrap();
        s.commit(tokens);
        s
    }

    fn keys(s: &SeqState) -> Vec<f32> {
        s.kv(0, s.len())
            .unwrap()
            .0
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    #[test]
    fn restores_the_longest_cached_block_prefix() {
        let mut c = PrefixCache::new(4, 1 << 20);
        let a: Vec<u32> = (0..10).collect();
        c.insert(&state_for(&a), &a).unwrap();
        assert_eq!(c.stats().blocks, 2, "two full blocks of 10 tokens");
        // Shares 6 tokens: one block.
        let mut b: Vec<u32> = (0..6).collect();
        b.extend([99, 98, 97, 96]);
        let mut s = SeqState::attention_only(1, 1000);
        assert_eq!(c.restore(&mut s, &b, b.len() - 1, 20).unwrap(), 4);
        assert_eq!(s.tokens(), &[0, 1, 2, 3]);
        assert_eq!(keys(&s), vec![0.0, 1.0, 2.0, 3.0]);
        // The limit caps the reuse (a prompt must keep a token to compute).
        let mut s = SeqState::attention_only(1, 1000);
        assert_eq!(c.restore(&mut s, &a[..8], 7, 20).unwrap(), 4);
        let mut s = SeqState::attention_only(1, 1000);
        assert_eq!(c.restore(&mut s, &a, 9, 20).unwrap(), 8);
        assert_eq!(keys(&s), (0..8).map(|x| x as f32).collect::<Vec<_>>());
        // A different first block shares nothing.
        let mut s = SeqState::attention_only(1, 1000);
        assert_eq!(c.restore(&mut s, &[5, 5, 5, 5, 5, 5], 5, 20).unwrap(), 0);
        assert!(s.is_empty());
        assert_eq!(c.stats().reused_tokens, 16);
    }

    #[test]
    fn evicts_least_recently_used_leaves_within_budget() {
        // One block of 4 positions, one layer, k and v f32: 32 bytes.
        let mut c = PrefixCache::new(4, 32 * 3);
        let p1: Vec<u32> = vec![1, 1, 1, 1, 2, 2, 2, 2];
        let p2: Vec<u32> = vec![1, 1, 1, 1, 3, 3, 3, 3];
        c.insert(&state_for(&p1), &p1).unwrap();
        c.insert(&state_for(&p2), &p2).unwrap();
        assert_eq!(c.stats().blocks, 3, "the first block is shared");
        // Use p1 again, then a third prompt: p2's leaf is the oldest.
        let mut s = SeqState::attention_only(1, 1000);
        assert_eq!(c.restore(&mut s, &p1, 8, 8).unwrap(), 8);
        let p3: Vec<u32> = vec![1, 1, 1, 1, 4, 4, 4, 4];
        c.insert(&state_for(&p3), &p3).unwrap();
        let st = c.stats();
        assert_eq!((st.blocks, st.blocks_evicted, st.bytes), (3, 1, 96));
        assert_eq!(c.reach(&p2, 8, false), 4, "p2's own block went");
        assert_eq!(c.reach(&p1, 8, false), 8);
        assert_eq!(c.reach(&p3, 8, false), 8);
        // A budget of 0 caches nothing.
        let mut off = PrefixCache::new(4, 0);
        off.insert(&state_for(&p1), &p1).unwrap();
        assert_eq!(off.stats().blocks, 0);
    }

    #[test]
    fn recurrent_prefixes_resume_only_where_a_state_was_kept() {
        let mk = |toks: &[u32], snap_at: &[usize]| {
            let mut s = SeqState::new(&[SlotKind::Recurrent, SlotKind::Kv], 100);
            let mut at = 0;
            for &cut in snap_at.iter().chain(std::iter::once(&toks.len())) {
                let t = cut - at;
                let k = Tensor::full(cut as f32, (1, t, 1), &Device::Cpu).unwrap();
                s.append_kv(1, &k, &k).unwrap();
                s.stage_recurrent(0, vec![Tensor::new(&[cut as f32], &Device::Cpu).unwrap()])
                    .unwrap();
                s.commit(&toks[at..cut]);
                s.snapshot();
                at = cut;
            }
            s
        };
        let p: Vec<u32> = (0..13).collect();
        let mut c = PrefixCache::new(4, 1 << 20);
        // Snapshots at 8 and 13 only: blocks end at 4, 8, 12.
        c.insert(&mk(&p, &[8]), &p).unwrap();
        assert_eq!(c.stats().blocks, 3);
        assert_eq!(
            c.reach(&p, 12, true),
            8,
            "only the block ending at 8 has a state"
        );
        assert_eq!(c.reach(&p, 12, false), 12);
        let mut s = SeqState::new(&[SlotKind::Recurrent, SlotKind::Kv], 100);
        assert_eq!(c.restore(&mut s, &p, 12, 20).unwrap(), 8);
        let r = s.recurrent(0).unwrap().unwrap()[0]
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(r, vec![8.0]);
        assert_eq!(s.snapshot_positions(), vec![8]);
    }
}
