//! The matrix products of the F16/BF16 and k-quant matrices (`floats.rs`, `kquants.rs`):
//! the portable path or an x86 tile, as the matrix's `Simd` says. Kept apart from the
//! matrices so that imports run one way: `x86/floats.rs` and `x86/kquants*.rs` use the
//! matrices, this file uses both, and the matrices' files use neither.

use std::ops::Range;

use super::floats::{FloatMatrix, HalfType};
use super::kquants::{KBlock, KMatrix, PORTABLE_PROMPT_MIN_ROWS};
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{run_tiles, Acts, ActsForm, CpuMatmul, Simd, Tiles};

impl<H: HalfType> CpuMatmul for FloatMatrix<H> {
    fn n(&self) -> usize {
        self.n
    }

    fn k(&self) -> usize {
        self.k
    }

    fn acts_form(&self) -> ActsForm {
        H::FORM
    }

    fn resident_bytes(&self) -> u64 {
        (self.w.capacity() * std::mem::size_of::<u16>()) as u64
    }

    fn dequantize(&self) -> Vec<f32> {
        (0..self.n)
            .flat_map(|j| self.row(j)[..self.k].iter().map(|&b| H::to_f32(b)))
            .collect()
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        let (x, ka) = H::acts(acts);
        debug_assert!(ka == self.kp && rows.end * ka <= x.len() && js.end <= self.n);
        match self.simd {
            Simd::Portable => {
                for j in js {
                    for r in rows.clone() {
                        let v = H::dot_portable(self.row(j), &x[r * ka..(r + 1) * ka]);
                        // SAFETY: the caller owns y[r, j] for these rows and weight rows.
                        unsafe { *y.add(r * self.n + j) = v };
                    }
                }
            }
            // SAFETY: `detect` checked AVX2, FMA and F16C; the caller guarantees the rows
            // exist and owns y[r, j] for them.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::AvxVnni => unsafe {
                x86::floats::run_avx2::<H>(self, x, rows, js, y)
            },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-512 F (and BW, VNNI).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => unsafe { x86::floats::run_avx512::<H>(self, x, rows, js, y) },
        }
    }
}

impl<B: KBlock> Tiles for KMatrix<B> {
    fn dot_tiles<const W: usize, const N: usize>(
        &self,
        js: [usize; W],
        acts: &Acts,
        rows: [usize; N],
    ) -> [[f32; N]; W] {
        match self.simd {
            Simd::Portable => std::array::from_fn(|w| {
                std::array::from_fn(|i| self.dot_portable(js[w], acts, rows[i]))
            }),
            // SAFETY: `detect` checked that the CPU has AVX2, FMA and F16C;
            // `run_chunk`'s caller guarantees the rows exist.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { x86::kquants256::dot_tile_k(self, js, acts, rows) },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => unsafe { x86::kquants256::dot_tile_k_vnni(self, js, acts, rows) },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-512 F, BW, VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => unsafe { x86::kquants512::dot_tile_k512(self, js, acts, rows) },
        }
    }
}

impl<B: KBlock> CpuMatmul for KMatrix<B> {
    fn n(&self) -> usize {
        self.n
    }

    fn resident_bytes(&self) -> u64 {
        (self.qs.capacity() * std::mem::size_of::<B::Qs>()
            + self.meta.capacity() * std::mem::size_of::<B::Meta>()) as u64
    }

    fn k(&self) -> usize {
        self.k
    }

    fn acts_form(&self) -> super::ActsForm {
        super::ActsForm::Supers
    }

    fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for (qs, meta) in self.qs.iter().zip(&self.meta) {
            let u = B::values(qs, meta);
            let (d, dmin) = B::d_dmin(meta);
            out.extend(u.iter().enumerate().map(|(v, &u)| {
                let s = v / 16;
                // ggml's order: (d·sc)·q − dmin·mn.
                let scale = d * B::scale16(meta, s) as f32;
                let min = dmin * B::min16(meta, s) as f32;
                scale * (i32::from(u) - B::OFFSET) as f32 - min
            }));
        }
        out
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        debug_assert!(acts.kbs == self.kbs && rows.end <= acts.rows());
        // Prompts on AVX-512 VNNI: the prompt path (each super-block of up to 16 weight
        // rows unpacked once for all the rows; a row's result is the same bits as in the
        // 2×4 tiles that decode uses).
        #[cfg(target_arch = "x86_64")]
        if self.simd == Simd::Avx512Vnni
            && rows.len() >= x86::kquants512::PROMPT_MIN_ROWS
            && !js.is_empty()
        {
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-512 F, BW, VNNI; the
            // caller guarantees the rows exist and owns y[r, j] for them; `js` is one
            // chunk of at most 16 weight rows.
            let mut j = js.start;
            while j < js.end {
                let end = js.end.min(j + 16);
                unsafe { x86::kquants512::run_prompt_k512(self, acts, rows.clone(), j..end, y) };
                j = end;
            }
            return;
        }
        // Portable prompts: each unpacked super-block serves every row.
        if self.simd == Simd::Portable && rows.len() >= PORTABLE_PROMPT_MIN_ROWS {
            for j in js {
                // SAFETY: as the caller guarantees.
                unsafe { self.run_prompt_portable(acts, rows.clone(), j, y) };
            }
            return;
        }
        // Prompts on AVX2 and AVX-VNNI: the same with 8 weight rows per register.
        #[cfg(target_arch = "x86_64")]
        if matches!(self.simd, Simd::Avx2 | Simd::AvxVnni)
            && rows.len() >= x86::kquants256::PROMPT_MIN_ROWS
            && !js.is_empty()
        {
            let mut j = js.start;
            while j < js.end {
                let end = js.end.min(j + 8);
                // SAFETY: `detect` checked AVX2, FMA, F16C (and AVX-VNNI for that
                // path); the caller guarantees the rows exist and owns y[r, j] for them;
                // `j..end` is 1 to 8 weight rows.
                unsafe {
                    if self.simd == Simd::AvxVnni {
                        x86::kquants256::run_prompt_k256_vnni(self, acts, rows.clone(), j..end, y)
                    } else {
                        x86::kquants256::run_prompt_k256(self, acts, rows.clone(), j..end, y)
                    }
                };
                j = end;
            }
            return;
        }
        // SAFETY: as the caller guarantees.
        unsafe { run_tiles(self, self.n, rows, js, acts, y) }
    }
}
