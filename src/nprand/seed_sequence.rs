//! numpy's `SeedSequence` (bit_generator.pyx): hashes integer entropy into a
//! pool of four 32-bit words and expands it into seed words for a bit
//! generator. Only the plain form is ported: integer entropy, no spawn key,
//! pool size 4.

const POOL_SIZE: usize = 4;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;

/// `numpy.random.SeedSequence(entropy)` with an integer entropy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

/// The entropy as 32-bit words, least significant first (`0` is `[0]`).
fn int_to_words(mut x: u128) -> Vec<u32> {
    if x == 0 {
        return vec![0];
    }
    let mut words = Vec::new();
    while x > 0 {
        words.push(x as u32);
        x >>= 32;
    }
    words
}

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

impl SeedSequence {
    pub fn new(entropy: u128) -> Self {
        let entropy = int_to_words(entropy);
        let mut pool = [0u32; POOL_SIZE];
        let mut hc = INIT_A;
        for (i, slot) in pool.iter_mut().enumerate() {
            *slot = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hc);
        }
        for src in 0..POOL_SIZE {
            for dst in 0..POOL_SIZE {
                if src != dst {
                    pool[dst] = mix(pool[dst], hashmix(pool[src], &mut hc));
                }
            }
        }
        for &word in entropy.iter().skip(POOL_SIZE) {
            for slot in pool.iter_mut() {
                *slot = mix(*slot, hashmix(word, &mut hc));
            }
        }
        Self { pool }
    }

    #[cfg(test)]
    /// The mixed entropy pool (`SeedSequence.pool`).
    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// `generate_state(n_words, np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hc = INIT_B;
        (0..n_words)
            .map(|i| {
                let mut v = self.pool[i % POOL_SIZE] ^ hc;
                hc = hc.wrapping_mul(MULT_B);
                v = v.wrapping_mul(hc);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n_words, np.uint64)`: pairs of 32-bit words, the
    /// first of each pair the low half.
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n_words)
            .chunks(2)
            .map(|c| c[0] as u64 | (c[1] as u64) << 32)
            .collect()
    }
}
