//! The race's random numbers, bit-for-bit as the reference draws them (spec
//! §1.5): CPython's `random.Random(int)` is MT19937 seeded with
//! `init_by_array` over the 32-bit words of the integer, and `random()` is
//! `(a·2^26 + b) / 2^53` with `a = next >> 5`, `b = next >> 6`. Seeds are
//! derived with the fixed affine stream map and the sampling-seed formula.

/// `2^31 − 1`, the modulus of every seed formula.
pub const SEED_MODULUS: i64 = 2_147_483_647;
/// Base seed of the reference experiments.
pub const BASE_SEED: i64 = 260_726;
/// Stream of the two-player horizon draws.
pub const STREAM_HORIZON: i64 = 17;
/// Stream of the two-player setback draws.
pub const STREAM_SETBACK: i64 = 29;
/// Stream of the N-player horizon draws.
pub const STREAM_NPLAYER_HORIZON: i64 = 53;
/// Stream of the N-player setback draws.
pub const STREAM_NPLAYER_SETBACK: i64 = 61;

/// `(seed·1_000_003 + stream·97_409 + 11_729) mod (2^31 − 1)` (§1.5).
pub fn stream_seed(seed: i64, stream: i64) -> i64 {
    let v = seed as i128 * 1_000_003 + stream as i128 * 97_409 + 11_729;
    v.rem_euclid(SEED_MODULUS as i128) as i64
}

/// Sampling seed sent with a model call (§1.5):
/// `(game_seed·100_000 + round·100 + player_index + retry·10_000_019) mod (2^31 − 1)`.
pub fn sampling_seed(game_seed: i64, round: u32, player_index: usize, retry: u32) -> i64 {
    let v = game_seed as i128 * 100_000
        + round as i128 * 100
        + player_index as i128
        + retry as i128 * 10_000_019;
    v.rem_euclid(SEED_MODULUS as i128) as i64
}

const N: usize = 624;
const M: usize = 397;

/// CPython's Mersenne Twister (`random.Random`).
#[derive(Clone)]
pub struct PyRandom {
    mt: [u32; N],
    index: usize,
}

impl PyRandom {
    /// `random.Random(seed)` for a non-negative integer seed (CPython uses
    /// the absolute value; the 32-bit words of the integer, least
    /// significant first, are the key of `init_by_array`).
    pub fn new(seed: u128) -> Self {
        let mut key = Vec::new();
        let mut s = seed;
        while s > 0 {
            key.push((s & 0xffff_ffff) as u32);
            s >>= 32;
        }
        if key.is_empty() {
            key.push(0);
        }
        Self::from_key(&key)
    }

    /// numpy's legacy `RandomState(seed)` for a 32-bit integer seed
    /// (`init_genrand`, no key array); [`Self::random`] is then
    /// `random_sample()`, the draw scikit-learn's k-means++ uses.
    pub fn numpy_legacy(seed: u32) -> Self {
        Self {
            mt: Self::init_genrand(seed),
            index: N,
        }
    }

    /// Seed from an `i64` the way Python does (`abs`).
    pub fn from_i64(seed: i64) -> Self {
        Self::new(seed.unsigned_abs() as u128)
    }

    fn init_genrand(s: u32) -> [u32; N] {
        let mut mt = [0u32; N];
        mt[0] = s;
        for i in 1..N {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        mt
    }

    fn from_key(key: &[u32]) -> Self {
        let mut mt = Self::init_genrand(19_650_218);
        let (mut i, mut j) = (1usize, 0usize);
        let mut k = N.max(key.len());
        while k > 0 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
            k -= 1;
        }
        k = N - 1;
        while k > 0 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            k -= 1;
        }
        mt[0] = 0x8000_0000;
        Self { mt, index: N }
    }

    fn generate(&mut self) {
        for kk in 0..N {
            let y = (self.mt[kk] & 0x8000_0000) | (self.mt[(kk + 1) % N] & 0x7fff_ffff);
            let mut v = self.mt[(kk + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.mt[kk] = v;
        }
        self.index = 0;
    }

    /// The next tempered 32-bit output (`genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.generate();
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `random.random()`: a double in [0, 1) with 53 random bits.
    pub fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numpy_random_state_zero() {
        // numpy.random.RandomState(0).random_sample(3)
        let mut r = super::PyRandom::numpy_legacy(0);
        let v: Vec<f64> = (0..3).map(|_| r.random()).collect();
        assert_eq!(
            v,
            [0.5488135039273248, 0.7151893663724195, 0.6027633760716439]
        );
    }

    use super::*;

    #[test]
    fn stream_seeds_match_the_spec_table() {
        // §1.5 test vectors (base 260726, rep 0..2).
        let horizon: Vec<i64> = (0..3)
            .map(|r| stream_seed(BASE_SEED + r, STREAM_HORIZON))
            .collect();
        let setback: Vec<i64> = (0..3)
            .map(|r| stream_seed(BASE_SEED + r, STREAM_SETBACK))
            .collect();
        assert_eq!(horizon, vec![882_928_573, 883_928_576, 884_928_579]);
        assert_eq!(setback, vec![884_097_481, 885_097_484, 886_097_487]);
    }

    #[test]
    fn sampling_seeds_match_the_spec() {
        assert_eq!(sampling_seed(BASE_SEED, 1, 0, 0), 302_796_336);
        assert_eq!(sampling_seed(BASE_SEED, 1, 0, 1), 312_796_355);
    }

    #[test]
    fn python_random_reference_values() {
        // CPython: random.Random(42).random() == 0.6394267984578837,
        // random.Random(0).random() == 0.8444218515250481.
        assert_eq!(PyRandom::new(42).random(), 0.6394267984578837);
        assert_eq!(PyRandom::new(0).random(), 0.8444218515250481);
        // A seed wider than 32 bits uses two key words.
        // random.Random(2**40 + 5).random() == 0.5043802970418443 (CPython 3.11).
        assert_eq!(
            PyRandom::new((1u128 << 40) + 5).random(),
            0.5043802970418443
        );
    }

    #[test]
    fn setback_draws_match_the_spec_table() {
        let cases = [
            (0, 0.06816372317918706, 0.19197774951361357),
            (1, 0.8217046034780485, 0.7800312934290051),
            (2, 0.3527641917610951, 0.9052448223186436),
        ];
        for (rep, d0, d1) in cases {
            let mut r = PyRandom::from_i64(stream_seed(BASE_SEED + rep, STREAM_SETBACK));
            assert_eq!(r.random(), d0, "rep {rep} seat 0");
            assert_eq!(r.random(), d1, "rep {rep} seat 1");
        }
    }
}
