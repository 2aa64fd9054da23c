//! The memory plan against what sequence states really hold, on every
//! architecture's fixture: after a prompt of `n` tokens a state holds exactly
//! the plan's keys/values at `kv_capacity(n)` positions plus its recurrent
//! state; the header's weight estimate is the same from Joule's reader and
//! from candle's; `joule models inspect --memory` prints the plan; a run on a
//! roster model plans before round 1; an F16 matrix on the CPU is held as 16-bit.

use candle_core::Device;
use joule::inference::engine::memory_plan::{StateFootprint, WeightEstimate};
use joule::inference::engine::model::{SeqState, SeqStep};
use joule::inference::engine::state::KvCache;
use joule::inference::files::gguf_header::{GgufInfo, ReadOptions};
use joule::inference::files::gguf_weights::GgufFile;
use joule::inference::models::load_model;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/roster")
        .join(name)
}

#[test]
fn planned_state_equals_what_a_prompt_leaves_on_every_architecture() {
    for arch in ["qwen3", "qwen35", "nemotron_h", "gemma4"] {
        let path = fixture(&format!("{arch}.f32.gguf"));
        let model = load_model(&path, &Device::Cpu).unwrap();
        let f32_kv = StateFootprint::probe(model.as_ref(), KvCache::F32)
            .unwrap()
            .kv_per_token;
        for kv in [KvCache::F32, KvCache::F16] {
            let fp = StateFootprint::probe(model.as_ref(), kv).unwrap();
            assert!(
                fp.kv_per_token > 0,
                "{arch}: every roster model has attention layers"
            );
            // An f16 cache holds each key and value in half the bytes.
            if kv == KvCache::F16 {
                assert_eq!(2 * fp.kv_per_token, f32_kv, "{arch}: f16 keys/values");
            }
            if arch == "qwen35" || arch == "nemotron_h" {
                assert!(fp.recurrent > 0, "{arch}: recurrent layers");
            } else {
                assert_eq!(fp.recurrent, 0, "{arch}");
            }
            for n in [1usize, 37, 100] {
                let mut st = model.new_state().with_kv_cache(kv);
                let ids: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % 50).collect();
                model.forward(&mut [SeqStep::new(&ids, &mut st)]).unwrap();
                assert_eq!(
                    st.bytes() as u64,
                    SeqState::kv_capacity(n) as u64 * fp.kv_per_token + fp.recurrent,
                    "{arch} {kv} after {n} tokens"
                );
                assert!(st.bytes() as u64 <= fp.per_sequence(n), "{arch} {kv} {n}");
                // One more token stays inside the plan of n + 1.
                model.forward(&mut [SeqStep::new(&[1], &mut st)]).unwrap();
                assert_eq!(
                    st.bytes() as u64,
                    SeqState::kv_capacity(n + 1) as u64 * fp.kv_per_token + fp.recurrent,
                    "{arch} {kv} after {} tokens",
                    n + 1
                );
            }
        }
    }
}

#[test]
fn weight_estimates_agree_between_readers_and_follow_the_rule() {
    for name in ["qwen35.f32.gguf", "qwen35.q8_0.gguf", "gemma4.q8_0.gguf"] {
        let path = fixture(name);
        let info = GgufInfo::read(&path, ReadOptions::default()).unwrap();
        let a = WeightEstimate::from_info(&info);
        let g = GgufFile::open(&path).unwrap();
        let b = WeightEstimate::from_content(g.content());
        assert_eq!(a, b, "{name}");
        let data = info.file_size - info.data_offset;
        assert!(a.file_bytes <= data, "{name}: {} > {data}", a.file_bytes);
        // f32 tensors load as stored; F16/BF16 ones (converters fall back to
        // F16 for rows q8_0 cannot hold) double; quantised ones stay as stored.
        let expected: u64 = info
            .tensors
            .iter()
            .map(|t| match t.type_name().as_str() {
                "F16" | "BF16" => t.n_elements * 4,
                _ => t.n_bytes.unwrap(),
            })
            .sum();
        assert_eq!(a.resident_bytes, expected, "{name}");
        if name.contains("f32") {
            assert_eq!(a.resident_bytes, a.file_bytes, "{name}");
        }
    }
}

#[test]
fn inspect_memory_prints_the_plan() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["models", "inspect"])
        .arg(fixture("qwen35.f32.gguf"))
        .args(["--memory", "--context", "2000", "--sequences", "10"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("memory plan on cpu: 1 run(s), sequences planned for 2000 tokens"),
        "{text}"
    );
    assert!(text.contains("qwen35.f32.gguf"), "{text}");
    assert!(text.contains("runs that fit:"), "{text}");
    // The model is loaded when the free memory is read: its weights count back into it.
    assert!(text.contains("of these weights already loaded)"), "{text}");
    // --context without --memory is refused by the argument parser.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["models", "inspect"])
        .arg(fixture("qwen35.f32.gguf"))
        .args(["--context", "2000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A backend whose device never has room: its plan says a GPU with 1 GiB free
/// and 4 GiB of weights. It records the demand it was asked about and every
/// batch it was asked to generate.
struct FullGpu {
    demands: Vec<joule::backend::MemoryDemand>,
    batches: usize,
}

impl joule::backend::Backend for FullGpu {
    fn name(&self) -> String {
        "full-gpu".into()
    }

    fn generate(
        &mut self,
        batch: &[joule::backend::ModelRequest],
    ) -> Vec<joule::backend::ModelResult> {
        self.batches += 1;
        batch
            .iter()
            .map(|r| {
                Err(joule::backend::BackendError {
                    model: r.model.clone(),
                    message: "nothing may run on a full GPU".into(),
                    partial_usage: None,
                })
            })
            .collect()
    }

    fn plan_memory(
        &mut self,
        demand: &joule::backend::MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn joule::backend::MemoryReport>>> {
        use joule::inference::engine::memory_plan::*;
        self.demands.push(demand.clone());
        const GIB: u64 = 1 << 30;
        Ok(Some(Box::new(MemoryPlan {
            device: "cuda".into(),
            runs: demand.runs,
            context: 4096,
            models: vec![ModelNeed {
                model: "big".into(),
                weights: WeightEstimate {
                    file_bytes: 4 * GIB,
                    resident_bytes: 4 * GIB,
                },
                state: StateFootprint {
                    kv_per_token: 1024,
                    recurrent: 0,
                    snapshots: Default::default(),
                },
                sequences: demand.sequences.values().sum(),
                prefix_cache: 0,
                scratch: 0,
            }],
            memory: Some(DeviceMemory {
                free: GIB,
                total: GIB,
                source: "test".into(),
                held: 0,
            }),
        })))
    }
}

#[test]
fn a_race_that_does_not_fit_the_gpu_stops_before_any_call() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/ai-race/baseline-scripted.toml");
    let mut cfg = joule::race::config::ExperimentConfig::load(&path).unwrap();
    // Two seats on a (planned) model, one scripted: the plan counts one
    // sequence per race and every race at once.
    for l in &mut cfg.lineups {
        l.seats[0] = "qwen2.5-7b-instruct".into();
    }
    let races = cfg.games().unwrap().len();
    let dir = tempfile::tempdir().unwrap();
    let mut backend = FullGpu {
        demands: Vec::new(),
        batches: 0,
    };
    let err = joule::race::run::run_experiment(&cfg, dir.path(), false, &mut backend)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not even one run fits"), "{err}");
    assert_eq!(backend.batches, 0, "a race was played");
    assert_eq!(backend.demands.len(), 1);
    assert_eq!(backend.demands[0].runs, races);
    assert_eq!(
        backend.demands[0].sequences.get("qwen2.5-7b-instruct"),
        Some(&races)
    );
}

/// Gemma 4's F16 `per_layer_model_proj` (a synthesized file in the real layout, two layers,
/// a small vocabulary) is Joule's 16-bit matrix on the CPU: the load holds 2 bytes per
/// weight for it (the header's estimate, which cannot tell a matrix from a table, counts
/// f32) and records it as Joule's.
#[test]
fn f16_matrices_are_held_as_16_bit_on_the_cpu() {
    use candle_core::quantized::GgmlDType;
    use joule::inference::files::manifest::Catalog;
    use joule::inference::files::synth::recipe::FileType;
    use joule::inference::files::synth::{synthesize, SynthOptions};
    let catalog = Catalog::load(None).unwrap();
    let m = catalog
        .iter()
        .find(|m| m.architecture == "gemma4" && m.synth.is_some())
        .expect("a Gemma 4 manifest with a [synth] table");
    let mut cfg = m.synth.clone().unwrap();
    cfg.vocab = cfg.vocab.min(1024);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gemma4.gguf");
    let opts = SynthOptions {
        out: out.clone(),
        file_type: FileType::Q4KM,
        layout: joule::inference::files::synth::Layout::LlamaCpp,
        layers: Some(2),
        seed: 1,
        vocab: None,
        chat_template: None,
        quiet: true,
    };
    synthesize(&m.name, &m.architecture, &cfg, &opts).unwrap();
    let mut g = GgufFile::open(&out).unwrap();
    let name = "per_layer_model_proj.weight";
    assert_eq!(g.tensor_dtype(name), Some(GgmlDType::F16));
    let shape = g.tensor_shape(name).unwrap();
    let (n, k) = (shape[0], shape[1]);
    let _model = joule::inference::models::load_model_from(&mut g, &Device::Cpu).unwrap();
    let joule_f16 =
        joule::knobs::cpu_kernel_types().is_none() && !joule::knobs::candle_kernels_only();
    let uses: Vec<_> = g
        .matmuls()
        .iter()
        .filter(|u| u.dtype == GgmlDType::F16 && (u.n, u.k) == (n, k))
        .collect();
    assert_eq!(uses.len(), 1);
    if joule_f16 {
        assert!(uses[0].joule);
        // k = 2560: whole 16-value steps, no padding.
        assert_eq!(g.held_of(name), (n * k * 2) as u64);
        let r = joule::backend::KernelRecord::local(
            &Device::Cpu,
            KvCache::F16,
            &[("gemma4".into(), g.matmuls())],
        );
        assert_eq!(r.types["F16"], "joule");
        assert!(
            r.models["gemma4"]["F16"].starts_with("joule (1 matrix)"),
            "{:?}",
            r.models
        );
    } else {
        assert_eq!(g.held_of(name), (n * k * 4) as u64);
    }
}
