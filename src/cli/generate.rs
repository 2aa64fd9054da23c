//! `joule generate`: load a GGUF model, generate from a prompt and print the
//! text (or ids) and the exact token counts.

use crate::backend::ChatMessage;
use crate::backend::GenParams;
use crate::inference::engine::device::select_device;
use crate::inference::engine::generate::{generate, GenOptions, GenSeq};
use crate::inference::files::gguf_weights::GgufFile;
use crate::inference::models::load_model_from;
use crate::inference::text::chat_template::ChatTemplate;
use crate::inference::text::tokenizer::Tokenizer;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The GGUF model file.
    #[arg(long)]
    pub gguf: PathBuf,
    /// Prompt text: sent as one user message through the model's chat
    /// template (or tokenised as is with --no-chat).
    #[arg(long, conflicts_with = "ids")]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids (no tokenizer needed).
    #[arg(long, value_delimiter = ',')]
    pub ids: Option<Vec<u32>>,
    /// Most tokens to generate (fewer when an end-of-generation token comes first).
    #[arg(long, default_value_t = 128)]
    pub max_tokens: u32,
    /// Sampling temperature; 0 = greedy (always the most likely token).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Sample only among the K most likely tokens (default: all).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Nucleus sampling: only the most likely tokens whose probabilities add up to P (0-1).
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than P times the most likely one's probability (0-1).
    #[arg(long, value_name = "P")]
    pub min_p: Option<f32>,
    /// llama.cpp's repeat penalty over the last 64 tokens: their positive logits divided by X,
    /// negative ones multiplied (above 1 repeats less; 1 is off).
    #[arg(long, value_name = "X")]
    pub repeat_penalty: Option<f32>,
    /// Sampling seed: the same seed on the same device gives the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use the prompt as is, without the model's chat template.
    #[arg(long)]
    pub no_chat: bool,
    /// End-of-generation token ids (with --ids; otherwise from the tokenizer).
    #[arg(long, value_delimiter = ',')]
    pub eos: Vec<u32>,
    /// Do not count the end-of-generation token as generated.
    #[arg(long)]
    pub no_count_eos: bool,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
}

pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let params = GenParams {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        seed: args.seed,
        ..GenParams::default()
    };
    // The Energy Society config's `[generation]` rules, before the model loads.
    if let Err((key, m)) = params.check() {
        bail!("--{}: {m}", key.replace('_', "-"));
    }
    crate::threads::setup(args.threads, None)?;
    let device = select_device(&args.device)?;
    // One parse of the header for the weights, the tokenizer and the template.
    let mut gguf = GgufFile::open(&args.gguf)?;
    let model = load_model_from(&mut gguf, &device)?;
    let mut tokenizer = None;
    let prompt: Vec<u32> = match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let tok = Tokenizer::for_gguf(&gguf)?;
            let ids = if args.no_chat {
                tok.encode(text, true, false)?
            } else {
                let rendered = render_chat(&gguf, &tok, text)?;
                tok.encode(&rendered, false, true)?
            };
            tokenizer = Some(tok);
            ids
        }
        (None, None) => bail!("give --prompt TEXT or --ids 1,2,3"),
    };
    let eos_ids = match (&tokenizer, args.eos.is_empty()) {
        (Some(tok), true) => tok.eos_ids(),
        _ => args.eos.clone(),
    };
    let options = GenOptions {
        eos_ids,
        count_eos: !args.no_count_eos,
        ..GenOptions::default()
    };
    let mut state = model.new_state();
    let g = generate(
        model.as_ref(),
        GenSeq {
            prompt: &prompt,
            state: &mut state,
            params: &params,
            options: &options,
            decode: None,
            mask: None,
        },
    )
    .with_context(|| format!("generating with {}", args.gguf.display()))?;
    match &tokenizer {
        Some(tok) => crate::outln!("{}", tok.decode(g.text_tokens(&options), false)),
        None => {
            let ids: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
            crate::outln!("{}", ids.join(","));
        }
    }
    print_counts(&g);
    Ok(ExitCode::SUCCESS)
}

/// Render `text` as one user message with the GGUF's own chat template.
fn render_chat(gguf: &GgufFile, tok: &Tokenizer, text: &str) -> Result<String> {
    let template = ChatTemplate::from_gguf_content(gguf.content(), tok)?.ok_or_else(|| {
        anyhow!(
            "{}: the GGUF file has no tokenizer.chat_template; use --no-chat",
            gguf.path().display()
        )
    })?;
    template.render(&[ChatMessage::user(text)], true, None)
}

fn print_counts(g: &crate::inference::engine::generate::Generation) {
    let tg = if g.decode_ms > 0.0 {
        (g.tokens.len().saturating_sub(1)) as f64 / (g.decode_ms / 1e3)
    } else {
        0.0
    };
    crate::errln!(
        "prompt_tokens={} generated_tokens={} thinking_tokens={} eos_counted={} finish={:?} prefill_ms={:.1} decode_ms={:.1} decode_tok_s={:.2}",
        g.prompt_tokens,
        g.generated_tokens,
        g.thinking_tokens,
        g.eos_counted,
        g.finish,
        g.prefill_ms,
        g.decode_ms,
        tg
    );
}
