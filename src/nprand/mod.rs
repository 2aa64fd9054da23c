//! A bit-exact port of the parts of numpy's random module (numpy ≥ 1.17,
//! `numpy.random.default_rng`) that the Energy Society's job draw uses
//! (spec §3 "Sampling"): `SeedSequence` seeding, the `PCG64` bit generator,
//! and `Generator`'s bounded integers, `choice(…, replace=False)`,
//! `shuffle` and `random()`.
//!
//! Written from numpy's algorithms (bit_generator.pyx, pcg64.h,
//! distributions.c, _generator.pyx); checked against numpy's own outputs in
//! `tests/fixtures/numpy/` (written by `scripts/gen_numpy_vectors.py`).

mod generator;
mod pcg64;
mod seed_sequence;

pub use generator::Generator;
pub use pcg64::Pcg64;
pub use seed_sequence::SeedSequence;

/// `numpy.random.default_rng(seed)` for a non-negative integer seed.
pub fn default_rng(seed: u128) -> Generator {
    Generator::new(Pcg64::from_seed_sequence(&SeedSequence::new(seed)))
}

#[cfg(test)]
mod tests;
