//! `joule models synth`: writes a GGUF file with random weights and exactly the layout of a
//! real model file: the tensor names, shapes and types, and the metadata, that llama.cpp's
//! converter and `llama-quantize` would write for the model a manifest describes (its
//! `[synth]` table holds the real configuration). Such files stand in for the roster's
//! models, which cannot be downloaded everywhere, in correctness checks against llama.cpp,
//! memory plans and benchmarks at real size.
//!
//! - [`layout`]: each architecture's tensors and metadata keys, and `--layers` scaling;
//! - [`ollama`]: the same model in the layout Ollama's own converter and quantizer write
//!   (`--layout ollama`);
//! - [`recipe`]: llama-quantize's quant mix (which tensor gets which type);
//! - [`weights`]: the seeded, chunkable random initialisers;
//! - [`gguf_writer`]: the streaming GGUF writer (header first, then tensor by tensor).
//!
//! Memory stays bounded by a few chunks of rows whatever the file's size. The file is written
//! as `FILE.partial` and renamed when complete, so a failed run leaves no truncated model.

pub mod gguf_writer;
pub mod layout;
pub mod ollama;
pub mod recipe;
pub mod weights;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use gguf_writer::{TensorEntry, TensorSink, Value};
use recipe::FileType;
use serde::Deserialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A model's real configuration, the `[synth]` table of its manifest. Widths are counts of
/// elements; which keys an architecture needs is checked when a file is planned.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynthConfig {
    /// Hidden size (`embedding_length`).
    pub hidden: u64,
    /// Layer count of the real model (MTP layers not counted).
    pub layers: u64,
    /// Attention (query) heads.
    pub heads: u64,
    /// KV heads of attention layers.
    pub kv_heads: u64,
    /// Head dimension (of full-attention layers, for Gemma 4).
    pub head_dim: u64,
    /// FFN (intermediate) size.
    pub ffn: u64,
    /// Rows of the embedding matrix (the real file's vocabulary, padding included).
    pub vocab: u64,
    /// `context_length`.
    pub context: u64,
    /// RMS-norm epsilon.
    pub norm_eps: f32,
    /// Whether the output matrix is the token embedding (no `output.weight`).
    pub tied: bool,
    #[serde(default)]
    pub rope_theta: Option<f32>,
    /// q/k/v biases (Qwen2).
    #[serde(default)]
    pub attn_bias: bool,
    /// Qwen3.5: rotary dimensions, MRoPE sections, full-attention interval, MTP layers.
    #[serde(default)]
    pub rope_dims: Option<u64>,
    #[serde(default)]
    pub rope_sections: Option<Vec<i32>>,
    #[serde(default)]
    pub full_attention_interval: Option<u64>,
    #[serde(default)]
    pub nextn_layers: Option<u64>,
    /// Recurrent layers: conv kernel, state size (Qwen3.5: key head dim), groups (Qwen3.5:
    /// key heads), heads (Qwen3.5: value heads; Mamba-2: heads), Mamba-2 head dim.
    #[serde(default)]
    pub ssm_conv: Option<u64>,
    #[serde(default)]
    pub ssm_state: Option<u64>,
    #[serde(default)]
    pub ssm_groups: Option<u64>,
    #[serde(default)]
    pub ssm_heads: Option<u64>,
    #[serde(default)]
    pub ssm_head_dim: Option<u64>,
    /// Nemotron-H: one character per layer, `M` Mamba-2, `*` attention, `-` MLP.
    #[serde(default)]
    pub layer_pattern: Option<String>,
    /// Gemma 4: sliding layers' head dim, window, sliding layers per full one, KV-shared
    /// layers, per-layer-embedding width, sliding RoPE θ, final soft-cap, full layers' rotary
    /// fraction.
    #[serde(default)]
    pub head_dim_swa: Option<u64>,
    #[serde(default)]
    pub sliding_window: Option<u64>,
    #[serde(default)]
    pub sliding_per_full: Option<u64>,
    #[serde(default)]
    pub shared_kv_layers: Option<u64>,
    #[serde(default)]
    pub per_layer_dim: Option<u64>,
    #[serde(default)]
    pub rope_theta_swa: Option<f32>,
    #[serde(default)]
    pub final_softcap: Option<f32>,
    #[serde(default)]
    pub full_rotary_fraction: Option<f32>,
}

/// Whose converter's layout the file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// llama.cpp's `convert_hf_to_gguf.py` and `llama-quantize` ([`layout`], [`recipe`]).
    LlamaCpp,
    /// Ollama's own converter and quantizer ([`ollama`]).
    Ollama,
}

impl Layout {
    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "llama.cpp" => Some(Layout::LlamaCpp),
            "ollama" => Some(Layout::Ollama),
            _ => None,
        }
    }
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub out: PathBuf,
    pub file_type: FileType,
    /// llama.cpp's layout and quant mix, or Ollama's (same values for the same seed).
    pub layout: Layout,
    /// Fewer layers than the real model (same widths, same layer kinds).
    pub layers: Option<u64>,
    pub seed: u64,
    /// A GGUF whose tokenizer and chat template are copied.
    pub vocab: Option<PathBuf>,
    /// A chat template (Jinja text) written as `tokenizer.chat_template`, replacing the
    /// vocabulary file's (for vocabularies that have none); needs `vocab`.
    pub chat_template: Option<String>,
    /// No progress lines on stderr.
    pub quiet: bool,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    pub path: PathBuf,
    pub bytes: u64,
    pub tensors: usize,
    pub parameters: u64,
    pub block_count: u64,
    /// One character per layer (see [`layout`]).
    pub kinds: String,
}

/// The metadata keys and tensor directory of the file, without writing anything.
pub fn plan_file(
    model: &str,
    arch: &str,
    cfg: &SynthConfig,
    opts: &SynthOptions,
) -> Result<(
    Vec<(String, Value)>,
    Vec<TensorEntry>,
    Vec<(weights::Init, String)>,
    layout::Plan,
)> {
    let layers = opts.layers.unwrap_or(cfg.layers);
    let ollama = opts.layout == Layout::Ollama;
    let mut plan = if ollama {
        ollama::check(model, arch, opts.file_type)?;
        ollama::plan(model, arch, cfg, layers)?
    } else {
        layout::plan(model, arch, cfg, layers)?
    };
    let shapes: Vec<recipe::Shape<'_>> = plan
        .tensors
        .iter()
        .map(|t| recipe::Shape {
            name: &t.name,
            ne: &t.ne,
        })
        .collect();
    let types = if ollama {
        ollama::assign(opts.file_type, arch, &shapes)
    } else {
        recipe::assign(opts.file_type, &shapes, plan.block_count)
    };
    let entries: Vec<TensorEntry> = plan
        .tensors
        .iter()
        .zip(&types)
        .map(|(t, &dtype)| TensorEntry {
            name: t.name.clone(),
            ne: t.ne.clone(),
            dtype,
        })
        .collect();
    let inits = plan
        .tensors
        .iter()
        .map(|t| (t.init.clone(), t.seed_name.clone()))
        .collect();
    let mut metadata = std::mem::take(&mut plan.metadata);
    let file_type = if ollama {
        ollama::file_type(opts.file_type)
    } else {
        opts.file_type.ftype()
    };
    metadata.push(("general.file_type".into(), Value::U32(file_type)));
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    match &opts.vocab {
        Some(path) => {
            metadata.extend(vocab_metadata(path, cfg.vocab, opts.layout)?);
            if let Some(t) = &opts.chat_template {
                metadata.retain(|(k, _)| k != "tokenizer.chat_template");
                metadata.push(("tokenizer.chat_template".into(), Value::Str(t.clone())));
            }
        }
        None if opts.chat_template.is_some() => {
            bail!("a chat template needs a tokenizer: give --vocab FILE with --chat-template")
        }
        None => {
            // no tokenizer: the file works by token ids (llama.cpp's "none" vocabulary, whose
            // size is `<arch>.vocab_size`)
            let key = format!("{arch}.vocab_size");
            if !metadata.iter().any(|(k, _)| *k == key) {
                metadata.push((key, Value::U32(cfg.vocab as u32)));
            }
            metadata.push(("tokenizer.ggml.model".into(), Value::Str("none".into())));
        }
    }
    if ollama {
        ollama::sort_metadata(&mut metadata, arch, opts.file_type);
    }
    Ok((metadata, entries, inits, plan))
}

/// The `tokenizer.*` keys of a vocabulary GGUF, with the token list (and its per-token
/// arrays) padded to `vocab` entries as the layout's converter pads real files (llama.cpp:
/// `[PADn]` from the first missing id, score 0, type unused; Ollama: [`ollama::pad_token`]).
fn vocab_metadata(path: &Path, vocab: u64, layout: Layout) -> Result<Vec<(String, Value)>> {
    use candle_core::quantized::gguf_file::{Content, Value as C};
    let mut f = std::fs::File::open(path)
        .with_context(|| format!("--vocab {}: cannot open", path.display()))?;
    let content = Content::read(&mut f)
        .map_err(|e| anyhow::anyhow!("--vocab {}: not a readable GGUF: {e}", path.display()))?;
    let mut keys: Vec<(&String, &C)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    let n_tokens = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(C::Array(items)) => items.len() as u64,
        _ => bail!("--vocab {}: no tokenizer.ggml.tokens array", path.display()),
    };
    if n_tokens > vocab {
        bail!(
            "--vocab {}: {n_tokens} tokens, more than the model's {vocab} embedding rows",
            path.display()
        );
    }
    let pad = vocab - n_tokens;
    let padding = |i: u64| match layout {
        Layout::LlamaCpp => (format!("[PAD{}]", n_tokens + i), 0.0, 5),
        Layout::Ollama => ollama::pad_token(i),
    };
    let mut out = Vec::new();
    for (k, v) in keys {
        let v = match (k.as_str(), v) {
            ("tokenizer.ggml.tokens", C::Array(items)) => {
                let mut items = items.clone();
                items.extend((0..pad).map(|i| C::String(padding(i).0)));
                C::Array(items)
            }
            ("tokenizer.ggml.token_type", C::Array(items)) => {
                let mut items = items.clone();
                items.extend((0..pad).map(|i| C::I32(padding(i).2)));
                C::Array(items)
            }
            ("tokenizer.ggml.scores", C::Array(items)) => {
                let mut items = items.clone();
                items.extend((0..pad).map(|i| C::F32(padding(i).1)));
                C::Array(items)
            }
            (_, v) => v.clone(),
        };
        out.push((k.clone(), Value::Other(v)));
    }
    Ok(out)
}

/// Writes the file; returns what was written. An `out` that is a folder is
/// refused before anything is written, and the `.partial` file is removed
/// on any failure.
pub fn synthesize(
    model: &str,
    arch: &str,
    cfg: &SynthConfig,
    opts: &SynthOptions,
) -> Result<SynthSummary> {
    if opts.out.is_dir() {
        bail!(
            "{}: is a folder, not a GGUF file to write; nothing was written",
            opts.out.display()
        );
    }
    let (metadata, entries, inits, plan) = plan_file(model, arch, cfg, opts)?;
    let partial = partial_path(&opts.out);
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let result = write_all(file, &metadata, &entries, &inits, opts);
    let bytes = match result {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e.context(format!("writing {}", opts.out.display())));
        }
    };
    if let Err(e) = std::fs::rename(&partial, &opts.out) {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "cannot rename {} to {}: {e}",
            partial.display(),
            opts.out.display()
        );
    }
    Ok(SynthSummary {
        path: opts.out.clone(),
        bytes,
        tensors: entries.len(),
        parameters: entries.iter().map(|e| e.elements()).sum(),
        block_count: plan.block_count,
        kinds: plan.kinds,
    })
}

fn partial_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

fn write_all(
    file: std::fs::File,
    metadata: &[(String, Value)],
    entries: &[TensorEntry],
    inits: &[(weights::Init, String)],
    opts: &SynthOptions,
) -> Result<u64> {
    let mut w = BufWriter::with_capacity(8 << 20, file);
    let total = gguf_writer::write_header(&mut w, metadata, entries)?;
    let progress = crate::progress::Progress::bytes_in(
        crate::progress::Mode::unless_quiet(opts.quiet),
        format!("synthesizing {}", opts.out.display()),
        total,
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (entry, (init, seed_name)) in entries.iter().zip(inits) {
        let key = weights::tensor_key(opts.seed, seed_name);
        let mut sink = TensorSink::new(&mut w, entry);
        let row = entry.ne[0];
        let rows = entry.elements() / row;
        let per_thread = rows_per_task(row, rows, threads as u64);
        let chunk_rows = per_thread * threads as u64;
        let mut r0 = 0;
        while r0 < rows {
            let r1 = (r0 + chunk_rows).min(rows);
            let parts = encode_rows(entry.dtype, init, key, row, r0, r1, per_thread)
                .with_context(|| format!("tensor {}", entry.name))?;
            for p in parts {
                sink.write(&p)?;
            }
            r0 = r1;
        }
        sink.finish(entry.bytes())?;
        progress.inc(entry.bytes());
    }
    w.flush()?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    progress.finish();
    Ok(total)
}

/// Rows each thread generates and encodes at a time: about 4 M elements, but fewer when that
/// would leave threads idle on a matrix of few rows (a 1,024 × 4,096 projection is one such
/// piece; split 16 ways it keeps 16 cores busy). The bytes written do not depend on it: values
/// come from their index alone and every type quantises row by row.
fn rows_per_task(row: u64, rows: u64, threads: u64) -> u64 {
    ((4u64 << 20) / row.max(1))
        .min(rows.div_ceil(threads.max(1)))
        .max(1)
}

/// Rows `r0..r1` of a tensor, generated and encoded on several threads, in order.
fn encode_rows(
    dtype: GgmlDType,
    init: &weights::Init,
    key: u64,
    row: u64,
    r0: u64,
    r1: u64,
    per_thread: u64,
) -> Result<Vec<Vec<u8>>> {
    let starts: Vec<u64> = (r0..r1).step_by(per_thread as usize).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = starts
            .iter()
            .map(|&a| {
                let b = (a + per_thread).min(r1);
                s.spawn(move || -> Result<Vec<u8>> {
                    let mut xs = vec![0f32; ((b - a) * row) as usize];
                    weights::fill(init, key, a * row, &mut xs);
                    encode(dtype, xs, row as usize)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("an encoding thread panicked"))?
            })
            .collect()
    })
}

/// Values in GGUF's encoding of `dtype` (rows of `row` elements).
fn encode(dtype: GgmlDType, xs: Vec<f32>, row: usize) -> Result<Vec<u8>> {
    Ok(match dtype {
        GgmlDType::F32 => xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GgmlDType::F16 => xs
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        GgmlDType::BF16 => xs
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect(),
        q => {
            let n = xs.len();
            let t = candle_core::Tensor::from_vec(xs, (n / row, row), &candle_core::Device::Cpu)?;
            QTensor::quantize(&t, q)?.data()?.into_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::files::manifest::Catalog;

    fn options(vocab: Option<PathBuf>, chat_template: Option<&str>) -> SynthOptions {
        SynthOptions {
            out: PathBuf::from("unused.gguf"),
            file_type: FileType::Q8_0,
            layout: Layout::LlamaCpp,
            layers: Some(1),
            seed: 0,
            vocab,
            chat_template: chat_template.map(str::to_string),
            quiet: true,
        }
    }

    fn template_of(meta: &[(String, Value)]) -> Vec<String> {
        meta.iter()
            .filter(|(k, _)| k == "tokenizer.chat_template")
            .map(|(_, v)| match v {
                Value::Str(s) => s.clone(),
                Value::Other(candle_core::quantized::gguf_file::Value::String(s)) => s.clone(),
                other => panic!("chat template of an unexpected type: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_encoded_bytes_do_not_depend_on_how_rows_are_split() {
        let (row, rows) = (512u64, 24u64);
        let init = weights::Init::Std(0.02);
        let key = weights::tensor_key(3, "blk.0.ffn_up.weight");
        for dtype in [
            GgmlDType::Q4K,
            GgmlDType::Q6K,
            GgmlDType::Q8_0,
            GgmlDType::F16,
        ] {
            let whole = encode_rows(dtype, &init, key, row, 0, rows, rows)
                .unwrap()
                .concat();
            for per in [1, 5, 7] {
                let mut parts = Vec::new();
                let mut r0 = 0;
                while r0 < rows {
                    let r1 = (r0 + per * 2).min(rows);
                    parts.extend(
                        encode_rows(dtype, &init, key, row, r0, r1, per)
                            .unwrap()
                            .concat(),
                    );
                    r0 = r1;
                }
                assert_eq!(parts, whole, "{dtype:?} in pieces of {per} rows");
            }
        }
        assert_eq!(rows_per_task(4096, 1024, 16), 64);
        assert_eq!(rows_per_task(4096, 151_936, 16), 1024);
        assert_eq!(rows_per_task(128, 1, 16), 1);
    }

    #[test]
    fn each_layout_pads_the_vocabulary_as_its_converter_does() {
        use candle_core::quantized::gguf_file::Value as C;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vocab.gguf");
        let arr = |f: fn(usize) -> Value| Value::Array((0..3).map(f).collect());
        let meta = vec![
            (
                "general.architecture".to_string(),
                Value::Str("llama".into()),
            ),
            (
                "tokenizer.ggml.tokens".to_string(),
                arr(|i| Value::Str(format!("t{i}"))),
            ),
            (
                "tokenizer.ggml.scores".to_string(),
                arr(|_| Value::F32(0.5)),
            ),
            (
                "tokenizer.ggml.token_type".to_string(),
                arr(|_| Value::I32(1)),
            ),
        ];
        let mut f = std::fs::File::create(&path).unwrap();
        gguf_writer::write_header(&mut f, &meta, &[]).unwrap();
        drop(f);
        let last = |layout| {
            let m = vocab_metadata(&path, 5, layout).unwrap();
            let get = |key: &str| match &m.iter().find(|(k, _)| k == key).unwrap().1 {
                Value::Other(C::Array(items)) => {
                    assert_eq!(items.len(), 5, "{key}");
                    items[3].clone()
                }
                other => panic!("{key}: {other:?}"),
            };
            let token = match get("tokenizer.ggml.tokens") {
                C::String(s) => s,
                other => panic!("{other:?}"),
            };
            let score = get("tokenizer.ggml.scores").to_f32().unwrap();
            let ty = get("tokenizer.ggml.token_type").to_i32().unwrap();
            (token, score, ty)
        };
        assert_eq!(last(Layout::LlamaCpp), ("[PAD3]".to_string(), 0.0, 5));
        assert_eq!(last(Layout::Ollama), ("[PAD0]".to_string(), -1.0, 4));
    }

    #[test]
    fn a_given_chat_template_replaces_the_vocabularys_and_needs_one() {
        let catalog = Catalog::embedded().unwrap();
        let m = catalog.get("qwen3-8b").unwrap();
        let cfg = m.synth.as_ref().unwrap();
        let vocab = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/tokenizers/ggml-vocab-qwen2.gguf");
        let (meta, ..) = plan_file(
            &m.name,
            &m.architecture,
            cfg,
            &options(Some(vocab.clone()), None),
        )
        .unwrap();
        let own = template_of(&meta);
        assert_eq!(own.len(), 1, "the qwen2 vocabulary carries a template");
        let (meta, ..) = plan_file(
            &m.name,
            &m.architecture,
            cfg,
            &options(Some(vocab), Some("{{ messages }}")),
        )
        .unwrap();
        assert_eq!(template_of(&meta), vec!["{{ messages }}".to_string()]);
        let err = match plan_file(&m.name, &m.architecture, cfg, &options(None, Some("x"))) {
            Ok(_) => panic!("a chat template without a vocabulary was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("--vocab"), "{err}");
    }

    #[test]
    fn a_folder_as_out_is_refused_and_leaves_no_partial_file() {
        let catalog = Catalog::embedded().unwrap();
        let m = catalog.get("smollm2-135m-instruct").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = SynthOptions {
            out: dir.path().to_path_buf(),
            ..options(None, None)
        };
        let err = synthesize(&m.name, &m.architecture, m.synth.as_ref().unwrap(), &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a folder"), "{err}");
        assert!(!partial_path(dir.path()).exists());
    }
}
