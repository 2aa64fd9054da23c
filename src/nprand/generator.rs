//! numpy's `Generator` methods used by the job draw (_generator.pyx,
//! distributions.c), each taking exactly the branch numpy takes:
//! - bounded integers (`integers`, and the draws inside `choice`): Lemire's
//!   multiply-and-reject, on `next_uint32` when the inclusive range fits in
//!   32 bits, on `next_uint64` (128-bit product) otherwise; the full ranges
//!   `0xFFFFFFFF` and `u64::MAX` take a raw draw;
//! - `random_interval` (used by `shuffle`): masked rejection, 32-bit draws
//!   when the bound fits in 32 bits;
//! - `choice(n, k, replace=False)` (no `p`, `shuffle=True`): a tail shuffle
//!   of `arange(n)` when `n > 10000` and `k > n // 50`, otherwise Floyd's
//!   algorithm followed by a Fisher–Yates shuffle of the result that draws
//!   with the bounded-integer routine (not `random_interval`);
//! - `shuffle(x)`: Fisher–Yates from the last element down to index 1 with
//!   `random_interval`; the ndarray and Python-list paths draw the same.

use super::Pcg64;

/// `numpy.random.Generator(PCG64(...))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    bitgen: Pcg64,
}

/// `ValueError`s numpy raises for the arguments handled here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrawError {
    #[cfg(test)]
    EmptyRange {
        low: i64,
        high: i64,
    },
    SampleTooLarge {
        size: usize,
        pop: usize,
    },
}

impl std::fmt::Display for DrawError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(test)]
            DrawError::EmptyRange { low, high } => {
                write!(f, "integers: low ({low}) must be less than high ({high})")
            }
            DrawError::SampleTooLarge { size, pop } => write!(
                f,
                "choice: cannot take a larger sample ({size}) than the population ({pop}) when replace is False"
            ),
        }
    }
}

impl std::error::Error for DrawError {}

impl Generator {
    pub fn new(bitgen: Pcg64) -> Self {
        Self { bitgen }
    }

    #[cfg(test)]
    /// `random()`: one float64 in [0, 1).
    pub fn random(&mut self) -> f64 {
        self.bitgen.next_f64()
    }

    #[cfg(test)]
    /// `integers(low, high, size=n)` with the default `dtype=int64`,
    /// `endpoint=False`.
    pub fn integers(&mut self, low: i64, high: i64, n: usize) -> Result<Vec<i64>, DrawError> {
        if low >= high {
            return Err(DrawError::EmptyRange { low, high });
        }
        let rng = (high as i128 - 1 - low as i128) as u64;
        let off = low as u64;
        Ok((0..n)
            .map(|_| off.wrapping_add(self.bounded_u64(rng)) as i64)
            .collect())
    }

    /// `random_bounded_uint64(state, 0, rng, 0, use_masked=False)`: uniform
    /// in `[0, rng]` inclusive.
    pub fn bounded_u64(&mut self, rng: u64) -> u64 {
        if rng == 0 {
            0
        } else if rng <= u32::MAX as u64 {
            if rng == u32::MAX as u64 {
                self.bitgen.next_u32() as u64
            } else {
                self.lemire_u32(rng as u32) as u64
            }
        } else if rng == u64::MAX {
            self.bitgen.next_u64()
        } else {
            self.lemire_u64(rng)
        }
    }

    fn lemire_u32(&mut self, rng: u32) -> u32 {
        let excl = rng + 1;
        let mut m = self.bitgen.next_u32() as u64 * excl as u64;
        let mut leftover = m as u32;
        if leftover < excl {
            let threshold = (u32::MAX - rng) % excl;
            while leftover < threshold {
                m = self.bitgen.next_u32() as u64 * excl as u64;
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }

    fn lemire_u64(&mut self, rng: u64) -> u64 {
        let excl = rng + 1;
        let mut m = self.bitgen.next_u64() as u128 * excl as u128;
        let mut leftover = m as u64;
        if leftover < excl {
            let threshold = (u64::MAX - rng) % excl;
            while leftover < threshold {
                m = self.bitgen.next_u64() as u128 * excl as u128;
                leftover = m as u64;
            }
        }
        (m >> 64) as u64
    }

    /// `random_interval(state, max)`: uniform in `[0, max]` by masked
    /// rejection.
    pub fn random_interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = u64::MAX >> max.leading_zeros();
        if max <= u32::MAX as u64 {
            loop {
                let v = self.bitgen.next_u32() as u64 & mask;
                if v <= max {
                    return v;
                }
            }
        } else {
            loop {
                let v = self.bitgen.next_u64() & mask;
                if v <= max {
                    return v;
                }
            }
        }
    }

    /// `_shuffle_int(n, first, data)` of `choice`: swaps `data[i]` with a
    /// bounded draw in `[0, i]` for `i = n-1 … first`.
    fn shuffle_int(&mut self, data: &mut [i64], first: usize) {
        for i in (first..data.len()).rev() {
            let j = self.bounded_u64(i as u64) as usize;
            data.swap(i, j);
        }
    }

    /// `choice(pop_size, size, replace=False)` (uniform, `shuffle=True`).
    pub fn choice_without_replacement(
        &mut self,
        pop_size: usize,
        size: usize,
    ) -> Result<Vec<i64>, DrawError> {
        if size > pop_size {
            return Err(DrawError::SampleTooLarge {
                size,
                pop: pop_size,
            });
        }
        if pop_size > 10000 && size > pop_size / 50 {
            // Tail shuffle: shuffle positions pop-1 … max(pop-size, 1), keep the tail.
            let mut idx: Vec<i64> = (0..pop_size as i64).collect();
            let first = (pop_size - size).max(1);
            self.shuffle_int(&mut idx, first);
            return Ok(idx.split_off(pop_size - size));
        }
        // Floyd: for j in pop-size .. pop, take a draw in [0, j], or j itself
        // when the draw is already taken.
        let mut out: Vec<i64> = Vec::with_capacity(size);
        let mut taken = std::collections::HashSet::with_capacity(size);
        for j in (pop_size - size)..pop_size {
            let val = self.bounded_u64(j as u64);
            if taken.insert(val) {
                out.push(val as i64);
            } else {
                taken.insert(j as u64);
                out.push(j as i64);
            }
        }
        self.shuffle_int(&mut out, 1);
        Ok(out)
    }

    /// `shuffle(x)` for a 1-d array or a Python list.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.random_interval(i as u64) as usize;
            x.swap(i, j);
        }
    }
}
