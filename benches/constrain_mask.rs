//! Mask speed of constrained JSON decoding on the real Qwen2 vocab (151k tokens).
//! Run: `cargo bench --bench constrain_mask` (prints timings; asserts nothing about speed).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use joule::inference::text::constrain::{JsonConstraint, JsonStyle, TokenVocab};
use rand::{Rng, SeedableRng};
use serde_json::json;

fn gpt2_unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(cs.iter())
        .filter_map(|(&b, &c)| char::from_u32(c).map(|c| (c, b as u8)))
        .collect()
}

fn main() -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/tokenizers/ggml-vocab-qwen2.gguf");
    let mut f = std::fs::File::open(&path)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut f)?;
    let tokens = content.metadata["tokenizer.ggml.tokens"].to_vec()?;
    let types = content.metadata["tokenizer.ggml.token_type"].to_vec()?;
    let eos = content.metadata["tokenizer.ggml.eos_token_id"].to_u32()?;
    let map = gpt2_unicode_to_byte();
    let mut bytes = Vec::new();
    let mut special = Vec::new();
    for (id, (t, ty)) in tokens.iter().zip(types.iter()).enumerate() {
        let s = t.to_string()?;
        let ty = ty.to_i32()?;
        if ty == 1 {
            bytes.push(s.chars().filter_map(|c| map.get(&c).copied()).collect());
        } else {
            bytes.push(s.as_bytes().to_vec());
            if ty == 3 || ty == 5 {
                special.push(id as u32);
            }
        }
    }
    let t0 = Instant::now();
    let vocab = Arc::new(TokenVocab::new(bytes, vec![eos], special)?);
    println!(
        "TokenVocab::new ({} tokens): {:?}",
        vocab.len(),
        t0.elapsed()
    );

    let schema = json!({
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "action": {"enum": ["ATTEMPT_JOB", "IDLE", "DONATE", "SABOTAGE_JOB"]},
            "job_id": {"type": ["string", "null"]},
            "target_agent": {"type": ["string", "null"]},
            "amount": {"type": ["number", "null"]}
        },
        "required": ["reasoning", "action", "job_id", "target_agent", "amount"]
    });
    let t0 = Instant::now();
    let style = JsonStyle {
        default_max_string_len: Some(64),
        ..JsonStyle::default()
    };
    let mut c = JsonConstraint::with_style(&schema, vocab.clone(), &style)?;
    println!("JsonConstraint::new: {:?}", t0.elapsed());

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (mut steps, mut mask_time) = (0u32, std::time::Duration::ZERO);
    for _ in 0..20 {
        c.reset();
        loop {
            let t0 = Instant::now();
            let mask = c.allowed_tokens()?;
            mask_time += t0.elapsed();
            steps += 1;
            let ids: Vec<u32> = mask.allowed_ids().collect();
            let tok = ids[rng.gen_range(0..ids.len())];
            c.advance(tok)?;
            if vocab.is_eos(tok) {
                break;
            }
        }
    }
    println!(
        "allowed_tokens: {steps} steps, mean {:?} per step",
        mask_time / steps
    );
    Ok(())
}
