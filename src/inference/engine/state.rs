//! Per-sequence model state: what one sequence has computed so far, layer by
//! layer, for every kind of layer the roster's architectures have.
//!
//! - **Attention layers** keep keys and values (`[n_kv_head, capacity,
//!   head_dim]`, grown by doubling, appended in place). They can be cut back
//!   to any earlier position.
//! - **Recurrent layers** (gated delta-net, Mamba-2) keep a fixed-size state
//!   (a convolution window and a recurrent matrix, or whatever the layer
//!   needs) that summarises *every* token seen. It cannot be cut back: the
//!   only way to return to an earlier position is a [`Snapshot`] taken when
//!   the sequence was there.
//! - **Layers without state** (Gemma 4's shared-KV layers read another
//!   layer's keys and values; MLP-only layers) hold nothing.
//!
//! Rules that keep reuse exact:
//! - Recurrent tensors are immutable values. A forward step *stages* the new
//!   state of each recurrent layer; [`SeqState::commit`] publishes all staged
//!   states together with the step's tokens, so a step that fails half-way
//!   leaves the committed state untouched. Snapshots can therefore share the
//!   tensors (no copy).
//! - [`SeqState::rewind`] returns the position the state could really go back
//!   to (the target itself without recurrent layers; otherwise the newest
//!   snapshot at or before it, or 0), and callers feed the tokens after that
//!   position again. A wrong state is never reused.
//! - `Clone` is a deep copy of the keys and values (which are written in
//!   place), so a clone never aliases the original's buffers.

use candle_core::{DType, Tensor};

/// How a sequence state stores keys and values (`[llm] kv_cache`): `f32`
/// (the default: the values as computed) or `f16` (half the memory; each key
/// and value is rounded to f16 once, when it is appended, and read back
/// exactly, so prefill, decode and the prefix cache all see the same values).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KvCache {
    #[default]
    F32,
    F16,
}

impl KvCache {
    /// Every choice.
    pub const ALL: [KvCache; 2] = [KvCache::F32, KvCache::F16];

    pub fn dtype(self) -> DType {
        match self {
            KvCache::F32 => DType::F32,
            KvCache::F16 => DType::F16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvCache::F32 => "f32",
            KvCache::F16 => "f16",
        }
    }
}

impl std::str::FromStr for KvCache {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown key/value cache type `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one layer of a model keeps per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// Keys and values of an attention layer.
    Kv,
    /// A recurrent state (conv window, delta-net or SSM state, ...).
    Recurrent,
    /// Nothing (MLP-only layers, layers that read another layer's KV).
    None,
}

/// When generation takes snapshots of a recurrent state while it feeds a
/// prompt: at every multiple of `every` tokens and just before the prompt's
/// last token (so a repeated or extended prompt can resume there). At most
/// `keep` snapshots are held per sequence; the least recently used goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub every: usize,
    pub keep: usize,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        Self {
            every: 256,
            keep: 8,
        }
    }
}

#[derive(Debug)]
enum Slot {
    Kv(Option<(Tensor, Tensor)>),
    Recurrent {
        live: Option<Vec<Tensor>>,
        staged: Option<Vec<Tensor>>,
    },
    None,
}

/// The recurrent states of every recurrent layer at one position.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pos: usize,
    states: Vec<Option<Vec<Tensor>>>,
    last_used: u64,
}

impl Snapshot {
    pub fn position(&self) -> usize {
        self.pos
    }
}

/// Everything one sequence has computed so far (see the module docs).
#[derive(Debug)]
pub struct SeqState {
    slots: Vec<Slot>,
    tokens: Vec<u32>,
    max_len: usize,
    snapshots: Vec<Snapshot>,
    policy: SnapshotPolicy,
    clock: u64,
    kv_cache: KvCache,
    /// Positions the next growth of a key/value buffer makes room for at
    /// least ([`Self::reserve_kv`]).
    kv_reserve: usize,
}

impl Clone for SeqState {
    fn clone(&self) -> Self {
        let len = self.tokens.len();
        let slots = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Kv(None) => Slot::Kv(None),
                // Deep copy: the original keeps appending into its buffers in place.
                Slot::Kv(Some((k, v))) => {
                    let copy = |t: &Tensor| -> Tensor {
                        t.narrow(1, 0, len)
                            .and_then(|x| x.copy())
                            .unwrap_or_else(|_| t.clone())
                    };
                    if len == 0 {
                        Slot::Kv(None)
                    } else {
                        Slot::Kv(Some((copy(k), copy(v))))
                    }
                }
                Slot::Recurrent { live, .. } => Slot::Recurrent {
                    live: live.clone(),
                    staged: None,
                },
                Slot::None => Slot::None,
            })
            .collect();
        Self {
            slots,
            tokens: self.tokens.clone(),
            max_len: self.max_len,
            snapshots: self.snapshots.clone(),
            policy: self.policy,
            clock: self.clock,
            kv_cache: self.kv_cache,
            kv_reserve: self.kv_reserve,
        }
    }
}

fn state_err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

impl SeqState {
    /// An empty state for a model whose layers keep `kinds`, holding at most
    /// `max_len` positions (the model's context length).
    pub fn new(kinds: &[SlotKind], max_len: usize) -> Self {
        let slots = kinds
            .iter()
            .map(|k| match k {
                SlotKind::Kv => Slot::Kv(None),
                SlotKind::Recurrent => Slot::Recurrent {
                    live: None,
                    staged: None,
                },
                SlotKind::None => Slot::None,
            })
            .collect();
        Self {
            slots,
            tokens: Vec::new(),
            max_len,
            snapshots: Vec::new(),
            policy: SnapshotPolicy::default(),
            clock: 0,
            kv_cache: KvCache::default(),
            kv_reserve: 0,
        }
    }

    /// An attention-only state (every layer keeps K/V).
    pub fn attention_only(n_layer: usize, max_len: usize) -> Self {
        Self::new(&vec![SlotKind::Kv; n_layer], max_len)
    }

    pub fn with_policy(mut self, policy: SnapshotPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn policy(&self) -> SnapshotPolicy {
        self.policy
    }

    /// Store keys and values as `kv` (meant for a fresh state: keys and
    /// values already held are converted at the next append).
    pub fn with_kv_cache(mut self, kv: KvCache) -> Self {
        self.kv_cache = kv;
        self
    }

    /// Make the next growth of each key/value buffer hold at least `len`
    /// positions (at most [`Self::max_len`]): a prompt of `len` tokens then
    /// allocates its buffers once, at [`Self::kv_capacity`]`(len)`, instead
    /// of doubling through every smaller capacity. The buffers a doubling
    /// outgrows are freed, but the `joule` binary's allocator keeps freed
    /// memory (`src/main.rs`), so each one would stay resident beside the
    /// final buffer (about as much again: 1,024 positions of SmolLM2 held
    /// 960 outgrown ones) — memory the plan does not count.
    pub fn reserve_kv(&mut self, len: usize) {
        self.kv_reserve = len.min(self.max_len);
    }

    /// How this state stores keys and values.
    pub fn kv_cache(&self) -> KvCache {
        self.kv_cache
    }

    /// Number of positions computed (the position of the next token).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens this state encodes, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn n_layer(&self) -> usize {
        self.slots.len()
    }

    /// The kind of every layer's slot.
    pub fn kinds(&self) -> Vec<SlotKind> {
        self.slots
            .iter()
            .map(|s| match s {
                Slot::Kv(_) => SlotKind::Kv,
                Slot::Recurrent { .. } => SlotKind::Recurrent,
                Slot::None => SlotKind::None,
            })
            .collect()
    }

    /// Whether any layer keeps a recurrent state (so rewinding needs snapshots).
    pub fn is_recurrent(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, Slot::Recurrent { .. }))
    }

    /// How many leading tokens of `prompt` this state encodes.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        self.tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Go back to at most `target` positions and return the position reached:
    /// `target` itself for attention-only states; for recurrent ones the
    /// newest snapshot at or before `target` (restored), or 0 (everything
    /// forgotten) when none covers it. Snapshots after the position reached
    /// are dropped (the tokens after it are about to change).
    pub fn rewind(&mut self, target: usize) -> usize {
        let target = target.min(self.len());
        if target == self.len() {
            return target;
        }
        if !self.is_recurrent() {
            self.tokens.truncate(target);
            return target;
        }
        let best = self
            .snapshots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pos <= target)
            .max_by_key(|(_, s)| s.pos)
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let pos = self.snapshots[i].pos;
                self.clock += 1;
                self.snapshots[i].last_used = self.clock;
                let states = self.snapshots[i].states.clone();
                for (slot, st) in self.slots.iter_mut().zip(states) {
                    if let Slot::Recurrent { live, staged } = slot {
                        *live = st;
                        *staged = None;
                    }
                }
                self.tokens.truncate(pos);
                self.snapshots.retain(|s| s.pos <= pos);
                pos
            }
            None => {
                self.clear();
                0
            }
        }
    }

    /// Forget everything (keys, values, recurrent states, snapshots).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.snapshots.clear();
        for slot in &mut self.slots {
            if let Slot::Recurrent { live, staged } = slot {
                *live = None;
                *staged = None;
            }
        }
    }

    /// Remember the recurrent states at the current position (a no-op for
    /// attention-only states and at position 0). Cheap: the tensors are shared.
    pub fn snapshot(&mut self) {
        if !self.is_recurrent() || self.is_empty() || self.policy.keep == 0 {
            return;
        }
        let pos = self.len();
        self.clock += 1;
        let states: Vec<Option<Vec<Tensor>>> = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Recurrent { live, .. } => live.clone(),
                _ => None,
            })
            .collect();
        if let Some(s) = self.snapshots.iter_mut().find(|s| s.pos == pos) {
            s.states = states;
            s.last_used = self.clock;
            return;
        }
        if self.snapshots.len() >= self.policy.keep {
            if let Some(i) = self
                .snapshots
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(i, _)| i)
            {
                self.snapshots.remove(i);
            }
        }
        self.snapshots.push(Snapshot {
            pos,
            states,
            last_used: self.clock,
        });
    }

    /// Positions of the snapshots held, ascending.
    pub fn snapshot_positions(&self) -> Vec<usize> {
        let mut p: Vec<usize> = self.snapshots.iter().map(|s| s.pos).collect();
        p.sort_unstable();
        p
    }

    /// Drop anything staged by a step that did not commit.
    pub fn discard_staged(&mut self) {
        for slot in &mut self.slots {
            if let Slot::Recurrent { staged, .. } = slot {
                *staged = None;
            }
        }
    }

    /// Append `k`, `v` (`[n_kv_head, t, head_dim]`) for attention `layer` at
    /// the current position and return all its keys and values
    /// (`[n_kv_head, len + t, head_dim]`). Positions are committed by
    /// [`Self::commit`] once every layer has run.
    pub fn append_kv(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let pos = self.tokens.len();
        let (n_kv, t, hd) = k.dims3()?;
        let vd = v.dim(2)?;
        let needed = pos + t;
        let dtype = self.kv_cache.dtype();
        let slot = match self.slots.get_mut(layer) {
            Some(Slot::Kv(s)) => s,
            Some(_) => return Err(state_err(format!("layer {layer} keeps no keys/values"))),
            None => return Err(state_err(format!("sequence state has no layer {layer}"))),
        };
        let cap = slot.as_ref().map(|(kc, _)| kc.dims()[1]).unwrap_or(0);
        // A buffer of another type (held from before `with_kv_cache`) is regrown.
        let stale = slot.as_ref().is_some_and(|(kc, _)| kc.dtype() != dtype);
        if needed > cap || stale {
            let new_cap = Self::kv_capacity(needed.max(self.kv_reserve));
            let grow = |old: Option<&Tensor>, d: usize| -> candle_core::Result<Tensor> {
                let fresh = Tensor::zeros((n_kv, new_cap, d), dtype, k.device())?;
                if let Some(old) = old {
                    if pos > 0 {
                        let kept = old.narrow(1, 0, pos)?.to_dtype(dtype)?.contiguous()?;
                        fresh.slice_set(&kept, 1, 0)?;
                    }
                }
                Ok(fresh)
            };
            let nk = grow(slot.as_ref().map(|(kc, _)| kc), hd)?;
            let nv = grow(slot.as_ref().map(|(_, vc)| vc), vd)?;
            *slot = Some((nk, nv));
        }
        let (kc, vc) = slot
            .as_ref()
            .ok_or_else(|| state_err("kv slot empty after growth".into()))?;
        kc.slice_set(&k.to_dtype(dtype)?.contiguous()?, 1, pos)?;
        vc.slice_set(&v.to_dtype(dtype)?.contiguous()?, 1, pos)?;
        Ok((kc.narrow(1, 0, needed)?, vc.narrow(1, 0, needed)?))
    }

    /// The first `len` keys and values of attention `layer` (for layers that
    /// share another layer's cache; `len` may include this step's tokens,
    /// which that layer appended earlier in the step).
    pub fn kv(&self, layer: usize, len: usize) -> candle_core::Result<(Tensor, Tensor)> {
        match self.slots.get(layer) {
            Some(Slot::Kv(Some((k, v)))) if k.dim(1)? >= len => {
                Ok((k.narrow(1, 0, len)?, v.narrow(1, 0, len)?))
            }
            Some(Slot::Kv(_)) => Err(state_err(format!(
                "layer {layer} holds fewer than {len} keys/values"
            ))),
            _ => Err(state_err(format!("layer {layer} keeps no keys/values"))),
        }
    }

    /// The committed recurrent state of `layer` (`None` before the first token).
    pub fn recurrent(&self, layer: usize) -> candle_core::Result<Option<&[Tensor]>> {
        match self.slots.get(layer) {
            Some(Slot::Recurrent { live, .. }) => Ok(live.as_deref()),
            _ => Err(state_err(format!("layer {layer} keeps no recurrent state"))),
        }
    }

    /// Stage the new recurrent state of `layer` (published by [`Self::commit`]).
    pub fn stage_recurrent(&mut self, layer: usize, state: Vec<Tensor>) -> candle_core::Result<()> {
        match self.slots.get_mut(layer) {
            Some(Slot::Recurrent { staged, .. }) => {
                *staged = Some(state);
                Ok(())
            }
            _ => Err(state_err(format!("layer {layer} keeps no recurrent state"))),
        }
    }

    /// Record that `tokens` went through every layer: publish staged
    /// recurrent states and advance the position.
    pub fn commit(&mut self, tokens: &[u32]) {
        for slot in &mut self.slots {
            if let Slot::Recurrent { live, staged } = slot {
                if let Some(s) = staged.take() {
                    *live = Some(s);
                }
            }
        }
        self.tokens.extend_from_slice(tokens);
    }

    /// Positions a key/value cache holds once it has grown to `len`: the
    /// next power of two, at least 64 (the memory plan reserves this much).
    pub fn kv_capacity(len: usize) -> usize {
        len.max(1).next_power_of_two().max(64)
    }

    /// Key and value bytes per cached position, over every attention layer
    /// that has cached at least one position.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.slots
            .iter()
            .map(|slot| match slot {
                Slot::Kv(Some((k, v))) => {
                    let dims = |t: &Tensor| {
                        let d = t.dims();
                        let per_pos =
                            d.first().copied().unwrap_or(0) * d.get(2).copied().unwrap_or(0);
                        per_pos * t.dtype().size_in_bytes()
                    };
                    dims(k) + dims(v)
                }
                _ => 0,
            })
            .sum()
    }

    /// Bytes of the live recurrent states (not counting snapshots).
    pub fn recurrent_bytes(&self) -> usize {
        let size = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        self.slots
            .iter()
            .map(|slot| match slot {
                Slot::Recurrent { live: Some(ts), .. } => ts.iter().map(size).sum(),
                _ => 0,
            })
            .sum()
    }

    /// The position [`Self::rewind`] would reach for `target`, without
    /// changing anything.
    pub fn reachable(&self, target: usize) -> usize {
        let target = target.min(self.len());
        if target == self.len() || !self.is_recurrent() {
            return target;
        }
        self.snapshots
            .iter()
            .map(|s| s.pos)
            .filter(|&p| p <= target)
            .max()
            .unwrap_or(0)
    }

    /// A copy of the keys and values of positions `start..start + len` of
    /// every layer (`None` for layers without keys and values), for a prefix
    /// cache. `None` when the state does not hold those positions.
    #[allow(clippy::type_complexity)]
    pub fn kv_range(
        &self,
        start: usize,
        len: usize,
    ) -> candle_core::Result<Option<Vec<Option<(Tensor, Tensor)>>>> {
        if start + len > self.len() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            out.push(match slot {
                Slot::Kv(Some((k, v))) => Some((
                    k.narrow(1, start, len)?.force_contiguous()?,
                    v.narrow(1, start, len)?.force_contiguous()?,
                )),
                Slot::Kv(None) => return Ok(None),
                _ => None,
            });
        }
        Ok(Some(out))
    }

    /// The recurrent states of every layer at position `pos` (the live state
    /// when the state is there, else a snapshot taken there); `None` when the
    /// state cannot give them. Shared tensors, no copy.
    pub fn recurrent_at(&self, pos: usize) -> Option<Vec<Option<Vec<Tensor>>>> {
        if pos == 0 || !self.is_recurrent() {
            return None;
        }
        if pos == self.len() {
            return Some(
                self.slots
                    .iter()
                    .map(|s| match s {
                        Slot::Recurrent { live, .. } => live.clone(),
                        _ => None,
                    })
                    .collect(),
            );
        }
        self.snapshots
            .iter()
            .find(|s| s.pos == pos)
            .map(|s| s.states.clone())
    }

    /// Replace everything with a prefix computed elsewhere: `tokens`, the
    /// keys and values of every attention layer as consecutive blocks
    /// (`[n_kv_head, block, head_dim]` each, covering `tokens`), and the
    /// recurrent states at the end of `tokens` (required when the state has
    /// recurrent layers; kept as a snapshot too). Buffers get room for
    /// `capacity` positions.
    pub fn restore_prefix(
        &mut self,
        tokens: &[u32],
        kv_blocks: &[&[Option<(Tensor, Tensor)>]],
        recurrent: Option<&[Option<Vec<Tensor>>]>,
        capacity: usize,
    ) -> candle_core::Result<()> {
        let n = tokens.len();
        if self.is_recurrent() && recurrent.is_none() {
            return Err(state_err(
                "a recurrent prefix needs its recurrent states".into(),
            ));
        }
        let mut slots = Vec::with_capacity(self.slots.len());
        for (li, slot) in self.slots.iter().enumerate() {
            slots.push(match slot {
                Slot::Kv(_) => {
                    let mut parts_k = Vec::with_capacity(kv_blocks.len());
                    let mut parts_v = Vec::with_capacity(kv_blocks.len());
                    for b in kv_blocks {
                        match b.get(li) {
                            Some(Some((k, v))) => {
                                parts_k.push(k);
                                parts_v.push(v);
                            }
                            _ => return Err(state_err(format!("prefix block lacks layer {li}"))),
                        }
                    }
                    let (Some(k0), Some(v0)) = (parts_k.first(), parts_v.first()) else {
                        return Err(state_err("an empty prefix has no blocks".into()));
                    };
                    let (n_kv, _, hd) = k0.dims3()?;
                    let vd = v0.dim(2)?;
                    if k0.dtype() != self.kv_cache.dtype() {
                        return Err(state_err(format!(
                            "prefix blocks hold {:?} keys/values; this state keeps {}",
                            k0.dtype(),
                            self.kv_cache
                        )));
                    }
                    let cap = Self::kv_capacity(capacity.max(n));
                    let kb = Tensor::zeros((n_kv, cap, hd), k0.dtype(), k0.device())?;
                    let vb = Tensor::zeros((n_kv, cap, vd), v0.dtype(), v0.device())?;
                    let mut at = 0;
                    for (k, v) in parts_k.iter().zip(&parts_v) {
                        kb.slice_set(k, 1, at)?;
                        vb.slice_set(v, 1, at)?;
                        at += k.dim(1)?;
                    }
                    if at != n {
                        return Err(state_err(format!(
                            "prefix blocks hold {at} positions for {n} tokens"
                        )));
                    }
                    Slot::Kv(Some((kb, vb)))
                }
                Slot::Recurrent { .. } => Slot::Recurrent {
                    live: recurrent.and_then(|r| r.get(li).cloned().flatten()),
                    staged: None,
                },
                Slot::None => Slot::None,
            });
        }
        self.slots = slots;
        self.tokens = tokens.to_vec();
        self.snapshots.clear();
        self.snapshot();
        Ok(())
    }

    /// Bytes held by the state's tensors (keys/values at capacity, live
    /// recurrent states, and snapshot tensors not shared with the live state).
    pub fn bytes(&self) -> usize {
        let size = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        let mut n = 0;
        for slot in &self.slots {
            match slot {
                Slot::Kv(Some((k, v))) => n += size(k) + size(v),
                Slot::Recurrent { live: Some(ts), .. } => n += ts.iter().map(size).sum::<usize>(),
                _ => {}
            }
        }
        for s in &self.snapshots {
            n += s.states.iter().flatten().flatten().map(size).sum::<usize>();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn kv(t: usize, val: f32) -> Tensor {
        Tensor::full(val, (1, t, 2), &Device::Cpu).unwrap()
    }

    #[test]
    fn clone_does_not_alias_written_buffers() {
        let mut a = SeqState::attention_only(1, 100);
        a.append_kv(0, &kv(3, 1.0), &kv(3, 1.0)).unwrap();
        a.commit(&[1, 2, 3]);
        let b = a.clone();
        a.rewind(1);
        a.append_kv(0, &kv(2, 9.0), &kv(2, 9.0)).unwrap();
        a.commit(&[7, 8]);
        let (bk, _) = b.kv(0, 3).unwrap();
        let v: Vec<f32> = bk.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(
            v,
            vec![1.0; 6],
            "the clone saw the original's in-place writes"
        );
        assert_eq!(b.tokens(), &[1, 2, 3]);
    }

    #[test]
    fn a_reserved_prompt_grows_its_buffers_once() {
        let cap = |s: &SeqState| match &s.slots[0] {
            Slot::Kv(Some((k, _))) => k.dims()[1],
            _ => 0,
        };
        let mut a = SeqState::attention_only(1, 10_000);
        a.reserve_kv(300);
        a.append_kv(0, &kv(64, 1.0), &kv(64, 1.0)).unwrap();
        a.commit(&[0; 64]);
        // Room for the whole prompt at the first piece: kv_capacity(300).
        assert_eq!(cap(&a), 512);
        a.append_kv(0, &kv(236, 2.0), &kv(236, 2.0)).unwrap();
        a.commit(&[0; 236]);
        assert_eq!(cap(&a), 512);
        let (k, _) = a.kv(0, 300).unwrap();
        let v: Vec<f32> = k.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(&v[..128], &[1.0; 128]);
        assert_eq!(&v[128..], &[2.0; 472]);
        // Without a reservation the buffer doubles from the piece's size;
        // a reservation beyond the context is cut to it.
        let mut b = SeqState::attention_only(1, 100);
        b.append_kv(0, &kv(64, 1.0), &kv(64, 1.0)).unwrap();
        assert_eq!(cap(&b), 64);
        b.reserve_kv(1_000);
        b.commit(&[0; 64]);
        b.append_kv(0, &kv(1, 1.0), &kv(1, 1.0)).unwrap();
        assert_eq!(cap(&b), 128);
    }

    #[test]
    fn an_f16_state_rounds_each_value_once_and_holds_half_the_bytes() {
        let mut a = SeqState::attention_only(1, 100);
        let mut b = SeqState::attention_only(1, 100).with_kv_cache(KvCache::F16);
        assert_eq!(b.kv_cache(), KvCache::F16);
        let x = Tensor::new(&[[[1.0f32 / 3.0, 70000.5]]], &Device::Cpu).unwrap();
        for s in [&mut a, &mut b] {
            s.append_kv(0, &x, &x).unwrap();
            s.commit(&[1]);
        }
        let (bk, _) = b.kv(0, 1).unwrap();
        assert_eq!(bk.dtype(), DType::F16);
        let got: Vec<f32> = bk
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let h = |v: f32| half::f16::from_f32(v).to_f32();
        assert_eq!(
            got,
            vec![h(1.0 / 3.0), h(70000.5)],
            "rounded to f16 (inf beyond its range)"
        );
        assert_eq!(2 * b.kv_bytes_per_token(), a.kv_bytes_per_token());
        assert_eq!(2 * b.bytes(), a.bytes());
        // Growth keeps the type and the values; a clone too.
        let y = Tensor::full(0.1f32, (1, 70, 2), &Device::Cpu).unwrap();
        b.append_kv(0, &y, &y).unwrap();
        b.commit(&[2; 70]);
        let (bk, bv) = b.clone().kv(0, 71).unwrap();
        assert_eq!((bk.dtype(), bv.dtype()), (DType::F16, DType::F16));
        assert_eq!(
            bk.narrow(1, 0, 1)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            got
        );
        // Blocks of another type are refused.
        let blocks = a.kv_range(0, 1).unwrap().unwrap();
        let mut c = SeqState::attention_only(1, 100).with_kv_cache(KvCache::F16);
        assert!(c.restore_prefix(&[1], &[&blocks], None, 8).is_err());
        assert_eq!("f16".parse::<KvCache>(), Ok(KvCache::F16));
        let e = "q8".parse::<KvCache>().unwrap_err();
        assert!(e.contains("`q8`") && e.contains("f32, f16"), "{e}");
    }

    fn rec_state() -> SeqState {
        SeqState::new(&[SlotKind::Recurrent, SlotKind::Kv], 100)
    }

    fn step(s: &mut SeqState, toks: &[u32], val: f32) {
        let t = toks.len();
        s.append_kv(1, &kv(t, val), &kv(t, val)).unwrap();
        s.stage_recurrent(0, vec![Tensor::new(&[val], &Device::Cpu).unwrap()])
            .unwrap();
        s.commit(toks);
    }

    fn rec_value(s: &SeqState) -> Option<f32> {
        s.recurrent(0)
            .unwrap()
            .map(|t| t[0].to_vec1::<f32>().unwrap()[0])
    }

    #[test]
    fn recurrent_rewind_goes_through_snapshots_only() {
        let mut s = rec_state();
        step(&mut s, &[1, 2, 3, 4], 4.0);
        s.snapshot();
        step(&mut s, &[5, 6], 6.0);
        s.snapshot();
        step(&mut s, &[7], 7.0);
        assert_eq!(s.snapshot_positions(), vec![4, 6]);
        // Back to 5: only the snapshot at 4 covers it.
        assert_eq!(s.rewind(5), 4);
        assert_eq!(s.len(), 4);
        assert_eq!(rec_value(&s), Some(4.0));
        assert_eq!(s.snapshot_positions(), vec![4], "later snapshots dropped");
        // Back to 3: nothing covers it, so everything is forgotten.
        assert_eq!(s.rewind(3), 0);
        assert!(s.is_empty());
        assert_eq!(rec_value(&s), None);
    }

    #[test]
    fn attention_rewind_is_exact() {
        let mut s = SeqState::attention_only(2, 100);
        for l in 0..2 {
            s.append_kv(l, &kv(5, 1.0), &kv(5, 1.0)).unwrap();
        }
        s.commit(&[1, 2, 3, 4, 5]);
        assert_eq!(s.rewind(3), 3);
        assert_eq!(s.tokens(), &[1, 2, 3]);
    }

    #[test]
    fn staged_state_is_invisible_until_commit() {
        let mut s = rec_state();
        step(&mut s, &[1], 1.0);
        s.stage_recurrent(0, vec![Tensor::new(&[2.0f32], &Device::Cpu).unwrap()])
            .unwrap();
        assert_eq!(rec_value(&s), Some(1.0));
        s.discard_staged();
        s.commit(&[]);
        assert_eq!(rec_value(&s), Some(1.0));
    }

    #[test]
    fn snapshots_are_bounded_lru() {
        let mut s = rec_state().with_policy(SnapshotPolicy { every: 1, keep: 2 });
        step(&mut s, &[1], 1.0);
        s.snapshot();
        step(&mut s, &[2], 2.0);
        s.snapshot();
        step(&mut s, &[3], 3.0);
        s.snapshot();
        assert_eq!(s.snapshot_positions(), vec![2, 3]);
        assert!(s.bytes() > 0);
        let _ = DType::F32;
    }

    #[test]
    fn wrong_slot_kinds_are_errors() {
        let mut s = rec_state();
        assert!(s.append_kv(0, &kv(1, 1.0), &kv(1, 1.0)).is_err());
        assert!(s.stage_recurrent(1, vec![]).is_err());
        assert!(s.kv(5, 1).is_err());
    }
}
