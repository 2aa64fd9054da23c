//! numpy's `PCG64` bit generator (pcg64.h/pcg64.c): 128-bit LCG state with
//! the XSL-RR output, plus numpy's one-word buffer that splits a 64-bit draw
//! into two 32-bit draws (low half first).

use super::SeedSequence;

const MULT: u128 = (2549297995355413924u128 << 64) | 4865540595714422341u128;

/// The PCG64 state as numpy keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    has_uint32: bool,
    uinteger: u32,
}

impl Pcg64 {
    /// `pcg64_set_seed`: `initstate`, `initseq` as 128-bit numbers.
    pub fn from_state_seq(initstate: u128, initseq: u128) -> Self {
        let mut g = Self {
            state: 0,
            inc: (initseq << 1) | 1,
            has_uint32: false,
            uinteger: 0,
        };
        g.step();
        g.state = g.state.wrapping_add(initstate);
        g.step();
        g
    }

    /// `PCG64(seed_sequence)`: four 64-bit seed words, (high, low) of the
    /// initial state then (high, low) of the stream.
    pub fn from_seed_sequence(seq: &SeedSequence) -> Self {
        let v = seq.generate_state_u64(4);
        let initstate = ((v[0] as u128) << 64) | v[1] as u128;
        let initseq = ((v[2] as u128) << 64) | v[3] as u128;
        Self::from_state_seq(initstate, initseq)
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(MULT).wrapping_add(self.inc);
    }

    #[cfg(test)]
    /// `bit_generator.state["state"]`: (state, inc).
    pub fn state(&self) -> (u128, u128) {
        (self.state, self.inc)
    }

    /// `next_uint64`: step, then XSL-RR of the new state.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        let x = ((s >> 64) as u64) ^ (s as u64);
        x.rotate_right((s >> 122) as u32)
    }

    /// `next_uint32`: the low half of a fresh 64-bit draw, the high half
    /// kept for the next call.
    pub fn next_u32(&mut self) -> u32 {
        if self.has_uint32 {
            self.has_uint32 = false;
            return self.uinteger;
        }
        let next = self.next_u64();
        self.has_uint32 = true;
        self.uinteger = (next >> 32) as u32;
        next as u32
    }

    #[cfg(test)]
    /// `next_double`: 53 random bits in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9007199254740992.0)
    }
}
