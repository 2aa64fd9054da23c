//! Building the record of the kernels a run's models use (`crate::backend::KernelRecord`, the
//! `[kernels]` table of a model-backed run's resolved config and the kernel
//! lines of `joule bench`): on the CPU the SIMD level of Joule's matmul
//! kernels (detected or forced by `JOULE_SIMD`), which GGUF types go to
//! Joule's kernels and which to candle's (the rule, and per loaded model the
//! matrices of each type and whose kernel multiplies them), how this CPU holds each type
//! Joule multiplies (rows in lanes or row major), the attention
//! path and the cache type; on CUDA and Metal which paths apply; with a
//! model server, that the server chose; and the value of every `JOULE_*`
//! variable that was set (`crate::knobs`).

use std::collections::BTreeMap;

use candle_core::quantized::GgmlDType;
use candle_core::Device;

use crate::backend::KernelRecord;
use crate::inference::engine::state::KvCache;
use crate::inference::files::gguf_weights::{ggml_name, MatmulUse};
use crate::inference::kernels::quant_matmul::{self, Simd};

/// The `JOULE_*` variables that are set now.
fn env() -> BTreeMap<String, String> {
    crate::knobs::set()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn type_name(t: GgmlDType) -> String {
    ggml_name(t).map_or_else(|| format!("{t:?}"), str::to_string)
}

/// Whether candle repacks Q8_0 on this CPU (its repacked Q8_0 needs AVX-512
/// VNNI or AVX-VNNI); the shape of [`quant_matmul::candle_repacks`]'s test is
/// one it repacks.
fn cpu_repacks(t: GgmlDType) -> bool {
    quant_matmul::candle_repacks(t, 16, 256)
}

/// A split type's rule, by the rows one sequence feeds in a step.
fn split_rule() -> String {
    format!(
        "joule for 1-{n} rows per sequence, candle for {m}+ (joule where candle does not \
         repack)",
        n = quant_matmul::SPLIT_ROWS,
        m = quant_matmul::SPLIT_ROWS + 1
    )
}

impl KernelRecord {
    /// The record of a local backend on `device` with caches of `kv_cache`,
    /// for `models`: each model's name and the weight matrices its load put
    /// behind a matrix product.
    pub fn local(device: &Device, kv_cache: KvCache, models: &[(String, &[MatmulUse])]) -> Self {
        let mut r = KernelRecord {
            backend: "candle".into(),
            device: Some(crate::inference::engine::device::device_name(device).into()),
            kv_cache: Some(kv_cache.name().into()),
            threads: Some(crate::threads::current()),
            env: env(),
            ..Default::default()
        };
        for (name, uses) in models {
            r.models.insert(name.clone(), per_type(uses));
        }
        if device.is_cuda() {
            r.matmul = "candle (quantised matmul on CUDA)".into();
            r.attention = "joule CUDA decode attention (llama, qwen2, qwen3, gemma3) for a batch \
                           of two or more one-token steps sharing a cache type, at a head size \
                           it supports; candle otherwise"
                .into();
            r.other = Some(
                "joule CUDA kernels (cuda feature): delta-net of qwen35 where its shapes are \
                 supported; candle otherwise"
                    .into(),
            );
            return r;
        }
        if device.is_metal() {
            r.matmul = "candle (quantised matmul on Metal)".into();
            r.attention = "candle".into();
            return r;
        }
        let available = Simd::available();
        r.simd_available = available.iter().map(|s| s.name().to_string()).collect();
        let forced = crate::knobs::simd().filter(|s| !s.is_empty());
        r.simd = Some(match Simd::detect() {
            Ok(s) => s.name().into(),
            Err(e) => format!("error: {e:#}"),
        });
        r.simd_from = Some(match forced {
            Some(_) => crate::knobs::SIMD.name.into(),
            None => "detected".into(),
        });
        if crate::knobs::candle_kernels_only() {
            let why = format!("candle ({} is set)", crate::knobs::CANDLE_KERNELS_ONLY.name);
            r.matmul = why.clone();
            r.attention = why;
            for t in quant_matmul::ALL_TYPES {
                r.types.insert(type_name(t), "candle".into());
            }
            return r;
        }
        r.attention = "joule fused CPU attention (cpu_attention: prompt tiles and decode steps, \
                       caches read in place)"
            .into();
        if let Ok(simd) = Simd::detect() {
            for t in quant_matmul::ALL_TYPES {
                if let Some(form) = quant_matmul::cpu_form(t, simd) {
                    r.forms.insert(type_name(t), form.into());
                }
            }
        }
        let spec = crate::knobs::cpu_kernel_types();
        match quant_matmul::kernel_types(spec.as_deref()) {
            Ok(Some(types)) => {
                r.matmul = format!(
                    "joule for the types {} names, whatever the shape and at every row count; candle for the others",
                    crate::knobs::CPU_KERNEL_TYPES.name
                );
                for t in quant_matmul::ALL_TYPES {
                    let who = if types.contains(&t) {
                        "joule"
                    } else {
                        "candle"
                    };
                    r.types.insert(type_name(t), who.into());
                }
            }
            Ok(None) => {
                let split = quant_matmul::split_requested(spec.as_deref());
                let split_types = quant_matmul::SPLIT_TYPES.map(type_name).join(", ");
                r.matmul = if split {
                    format!(
                        "{}=split: joule for its default types (quant_matmul::DEFAULT_TYPES) \
                         unless candle repacks the matrix and rounds as llama.cpp; for \
                         {split_types} where candle repacks the matrix (held by both), joule for \
                         each sequence's rows of a \
                         step when they are 1 to {} (decode, small batches) and candle for \
                         longer ones (prompts), joule where candle does not repack it; candle \
                         for the others",
                        crate::knobs::CPU_KERNEL_TYPES.name,
                        quant_matmul::SPLIT_ROWS
                    )
                } else {
                    format!(
                        "joule for its default types (quant_matmul::DEFAULT_TYPES) unless candle \
                         repacks the matrix and rounds as llama.cpp, and for {split_types} \
                         (held once; candle would keep the file's blocks and its repacked \
                         copies); candle for the others"
                    )
                };
                let repacked: Vec<String> = quant_matmul::DEFAULT_TYPES
                    .into_iter()
                    .chain(quant_matmul::SPLIT_TYPES)
                    .filter(|&t| cpu_repacks(t))
                    .map(type_name)
                    .collect();
                r.candle_repacks = Some(format!(
                    "candle 0.11 repacks a [n, k] matrix with n a multiple of 16 and k of 256 \
                     for {} on this CPU (Q8_0 only with AVX-512 VNNI or AVX-VNNI); such a \
                     matrix of a default type goes to candle unless candle rounds its \
                     activations otherwise than llama.cpp (Q8_0: 256-value blocks, not 32), \
                     which stays with joule; one of {split_types} {}",
                    repacked.join(", "),
                    if split {
                        "is split by rows"
                    } else {
                        "stays with joule"
                    },
                ));
                let split_rule = split_rule();
                for t in quant_matmul::ALL_TYPES {
                    let who = if quant_matmul::SPLIT_TYPES.contains(&t) {
                        if split && cpu_repacks(t) {
                            split_rule.clone()
                        } else {
                            "joule".into()
                        }
                    } else if !quant_matmul::DEFAULT_TYPES.contains(&t) {
                        "candle".into()
                    } else if quant_matmul::leaves_to_candle(t, 16, 256) {
                        "joule unless candle repacks".into()
                    } else {
                        "joule".into()
                    };
                    r.types.insert(type_name(t), who);
                }
            }
            Err(e) => {
                r.matmul = format!("error: {e:#}");
            }
        }
        r
    }

    /// The record of a model server: it chose its kernels.
    pub fn served(backend: &str) -> Self {
        KernelRecord {
            backend: backend.into(),
            matmul: "chosen by the server".into(),
            attention: "chosen by the server".into(),
            env: env(),
            ..Default::default()
        }
    }

    /// The record as lines `key: value` (for `joule bench`).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut head = format!("kernels: backend {}", self.backend);
        if let Some(d) = &self.device {
            head += &format!(", device {d}");
        }
        if let Some(s) = &self.simd {
            head += &format!(
                ", simd {s} ({})",
                self.simd_from.as_deref().unwrap_or("detected")
            );
        }
        if let Some(k) = &self.kv_cache {
            head += &format!(", kv cache {k}");
        }
        if let Some(t) = self.threads {
            head += &format!(", {t} thread{}", if t == 1 { "" } else { "s" });
        }
        out.push(head);
        out.push(format!("  matmul: {}", self.matmul));
        if let Some(c) = &self.candle_repacks {
            out.push(format!("  candle repacks: {c}"));
        }
        if !self.types.is_empty() {
            let t: Vec<String> = self.types.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push(format!("  types: {}", t.join(", ")));
        }
        if !self.forms.is_empty() {
            let t: Vec<String> = self.forms.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push(format!("  forms: {}", t.join(", ")));
        }
        for (m, types) in &self.models {
            let t: Vec<String> = types.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push(format!("  {m}: {}", t.join(", ")));
        }
        out.push(format!("  attention: {}", self.attention));
        if let Some(o) = &self.other {
            out.push(format!("  other: {o}"));
        }
        if !self.env.is_empty() {
            let e: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            out.push(format!("  set: {}", e.join(" ")));
        }
        out
    }
}

/// Per GGUF type: whose kernel multiplies how many of these matrices.
fn per_type(uses: &[MatmulUse]) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    for u in uses {
        let c = counts.entry(type_name(u.dtype)).or_default();
        c[if u.split {
            2
        } else if u.joule {
            0
        } else {
            1
        }] += 1;
    }
    let count =
        |who: &str, n: usize| format!("{who} ({n} {})", if n == 1 { "matrix" } else { "matrices" });
    let split = format!(
        "joule for 1-{} rows per sequence, candle for more",
        quant_matmul::SPLIT_ROWS
    );
    counts
        .into_iter()
        .map(|(t, c)| {
            let parts: Vec<String> = [("joule", c[0]), ("candle", c[1]), (split.as_str(), c[2])]
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(who, n)| count(who, n))
                .collect();
            (t, parts.join(", "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_type_counts_each_kernel() {
        let u = |dtype, joule| MatmulUse {
            dtype,
            n: 16,
            k: 256,
            joule,
            split: false,
        };
        let t = per_type(&[
            u(GgmlDType::Q4_1, true),
            u(GgmlDType::Q4_1, true),
            u(GgmlDType::Q8_0, false),
            u(GgmlDType::Q6K, true),
            u(GgmlDType::Q6K, false),
        ]);
        assert_eq!(t["Q4_1"], "joule (2 matrices)");
        assert_eq!(t["Q8_0"], "candle (1 matrix)");
        assert_eq!(t["Q6_K"], "joule (1 matrix), candle (1 matrix)");
        let split = per_type(&[MatmulUse {
            dtype: GgmlDType::Q4K,
            n: 4096,
            k: 4096,
            joule: false,
            split: true,
        }]);
        assert_eq!(
            split["Q4_K"],
            format!(
                "joule for 1-{} rows per sequence, candle for more (1 matrix)",
                quant_matmul::SPLIT_ROWS
            )
        );
    }

    #[test]
    fn a_cpu_record_names_simd_and_every_type_and_reads_back() {
        let uses = [MatmulUse {
            dtype: GgmlDType::Q4_1,
            n: 576,
            k: 576,
            joule: true,
            split: false,
        }];
        let r = KernelRecord::local(&Device::Cpu, KvCache::F16, &[("m".into(), &uses[..])]);
        assert_eq!(r.backend, "candle");
        assert_eq!(r.kv_cache.as_deref(), Some("f16"));
        assert!(r.simd_available.contains(&"portable".to_string()));
        assert!(r.simd.is_some());
        if !crate::knobs::candle_kernels_only() && crate::knobs::cpu_kernel_types().is_none() {
            assert_eq!(r.types["Q4_1"], "joule");
            assert_eq!(r.forms["Q4_1"], "row major");
            let lanes = r.simd.as_deref() == Some("avx512vnni");
            for t in ["Q5_0", "Q8_0", "Q4_K"] {
                assert_eq!(r.forms[t].starts_with("rows in lanes"), lanes, "{t}");
            }
            assert_eq!(r.types["Q4_K"], "joule");
            assert_eq!(r.types["Q6_K"], "joule");
            assert_eq!(r.types["Q5_K"], "joule");
            assert!(r.types["Q8_0"].starts_with("joule"));
            // F16/BF16 matrices: Joule's 16-bit ones (`quant_matmul::floats`).
            assert_eq!(r.types["F16"], "joule");
            assert_eq!(r.types["BF16"], "joule");
        }
        #[derive(serde::Serialize, serde::Deserialize)]
        struct T {
            kernels: KernelRecord,
        }
        let text = toml::to_string_pretty(&T { kernels: r.clone() }).unwrap();
        assert!(text.contains("[kernels.models.m]"), "{text}");
        let back: T = toml::from_str(&text).unwrap();
        assert_eq!(back.kernels, r);
        let served = KernelRecord::served("openai");
        assert!(served.lines()[0].contains("openai"));
    }
}
