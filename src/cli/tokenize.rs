//! `joule tokenize`: print the token ids of a text under a GGUF file's
//! tokenizer (no BOS/EOS added, special-token texts not parsed), space-separated
//! on one line — the same ids llama.cpp's tokenizer tests expect.

use crate::inference::text::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// GGUF file whose `tokenizer.ggml.*` metadata defines the tokenizer.
    #[arg(long)]
    pub gguf: PathBuf,
    /// Text file to tokenize (standard input when absent).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Also add BOS/EOS where the vocabulary asks for them.
    #[arg(long)]
    pub add_special: bool,
    /// Turn special-token texts (`<|im_start|>`) into their ids.
    #[arg(long)]
    pub parse_special: bool,
}

pub fn run(args: TokenizeArgs) -> Result<ExitCode> {
    let tok = Tokenizer::from_gguf_file(&args.gguf)?;
    let text = match &args.file {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading standard input")?;
            s
        }
    };
    let ids = tok.encode(&text, args.add_special, args.parse_special)?;
    let line: Vec<String> = ids.iter().map(u32::to_string).collect();
    crate::outln!("{}", line.join(" "));
    Ok(ExitCode::SUCCESS)
}
