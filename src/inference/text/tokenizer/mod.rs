//! Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata — what
//! Ollama and llama.cpp users have, with no `tokenizer.json` — encoding and
//! decoding exactly as llama.cpp does (checked against llama.cpp's own test
//! vectors in `../shared/data/tokenizers/`).
//!
//! Supported vocabularies:
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE with one of the
//!   pre-tokenizers of [`pretokenize::PreKind`] (`qwen2`, `qwen35`,
//!   `llama-bpe`, `smollm`, `gpt-2`, ...);
//! - `"gemma4"`: BPE over raw UTF-8 where spaces are written `▁` and missing
//!   pieces are spelled with `<0xXX>` byte tokens;
//! - `"llama"`: SentencePiece BPE by scores (Llama 2, Mistral, Gemma 1–3).
//!
//! Any other model type or pre-tokenizer is an error naming the file and the
//! value: there is no silent fallback to GPT-2's rules.
//!
//! Special tokens (control, user-defined and unknown entries) are cut out of
//! the text before the rest is tokenized. As in llama.cpp, user-defined
//! tokens are always matched, control tokens only when `parse_special` is on.

pub mod bpe;
pub mod byte_level;
pub mod hf_json;
pub mod pretokenize;
pub mod spm;
pub mod stream;

pub use pretokenize::PreKind;
pub use stream::StreamDecoder;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

// Token attributes, as llama.cpp keeps them (a bit set).
const ATTR_UNDEFINED: u32 = 0;
const ATTR_UNKNOWN: u32 = 1 << 0;
const ATTR_UNUSED: u32 = 1 << 1;
const ATTR_NORMAL: u32 = 1 << 2;
const ATTR_CONTROL: u32 = 1 << 3;
const ATTR_USER_DEFINED: u32 = 1 << 4;
const ATTR_BYTE: u32 = 1 << 5;

/// What kind of vocabulary entry a token is (GGUF `tokenizer.ggml.token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    /// Control tokens: `<|im_end|>`, `<bos>`, `<|eot_id|>`, ...
    Control,
    /// Tokens added to the vocabulary as whole strings (`<think>` in Qwen).
    UserDefined,
    Unused,
    /// `<0xXX>`: one raw byte.
    Byte,
    Undefined,
}

/// The texts that end generation, as llama.cpp lists them (`special_eog_ids`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
];
/// Fill-in-the-middle tokens llama.cpp also treats as end of generation.
const FIM_EOG_TEXTS: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

#[derive(Debug)]
enum Model {
    /// Byte-level (or, for Gemma 4, raw UTF-8) BPE.
    Bpe {
        pre: pretokenize::PreTokenizer,
        merges: bpe::Merges,
        /// Token of each single byte: the byte's GPT-2 character, or `<0xXX>`.
        byte_token: Box<[Option<u32>; 256]>,
    },
    /// SentencePiece BPE by scores.
    Spm { byte_token: Box<[Option<u32>; 256]> },
}

/// A tokenizer read from GGUF metadata. Cheap to share behind an `Arc`;
/// every method takes `&self`.
#[derive(Debug)]
pub struct Tokenizer {
    source: PathBuf,
    model_name: String,
    pre_name: Option<String>,
    model: Model,
    texts: Vec<String>,
    bytes: Vec<Vec<u8>>,
    attrs: Vec<u32>,
    scores: Vec<f32>,
    token_to_id: HashMap<String, u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    escape_whitespaces: bool,
    eog: BTreeSet<u32>,
    /// Special tokens, longest text first (ties by id), and a matcher that
    /// finds which of them occur in a text.
    special: Vec<u32>,
    special_finder: Option<aho_corasick::AhoCorasick>,
    /// A `tokenizer.json` used for encoding instead of the GGUF rules.
    hf: Option<hf_json::HfEncoder>,
}

/// Typed access to GGUF metadata with errors naming the file and the key.
struct Meta<'a> {
    md: &'a HashMap<String, Value>,
    path: &'a Path,
}

impl<'a> Meta<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.md.get(key)
    }
    fn string(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => bail!(
                "{}: metadata `{key}` should be a string, found {:?}",
                self.path.display(),
                v.value_type()
            ),
        }
    }
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        let v = match self.get(key) {
            None => return Ok(None),
            Some(v) => v,
        };
        let n: i128 = match v {
            Value::U8(x) => *x as i128,
            Value::I8(x) => *x as i128,
            Value::U16(x) => *x as i128,
            Value::I16(x) => *x as i128,
            Value::U32(x) => *x as i128,
            Value::I32(x) => *x as i128,
            Value::U64(x) => *x as i128,
            Value::I64(x) => *x as i128,
            _ => bail!(
                "{}: metadata `{key}` should be an integer, found {:?}",
                self.path.display(),
                v.value_type()
            ),
        };
        if n < 0 {
            bail!(
                "{}: metadata `{key}` should be a non-negative integer, found {n}",
                self.path.display()
            );
        }
        Ok(Some(n as u64))
    }
    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => bail!(
                "{}: metadata `{key}` should be a bool, found {:?}",
                self.path.display(),
                v.value_type()
            ),
        }
    }
    fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => bail!(
                "{}: metadata `{key}` should be an array, found {:?}",
                self.path.display(),
                v.value_type()
            ),
        }
    }
    fn strings(&self, key: &str) -> Result<Option<Vec<&'a str>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                v => bail!(
                    "{}: `{key}[{i}]` should be a string, found {:?}",
                    self.path.display(),
                    v.value_type()
                ),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
    fn numbers(&self, key: &str) -> Result<Option<Vec<f64>>> {
        let Some(a) = self.array(key)? else {
            return Ok(None);
        };
        a.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::F32(x) => Ok(*x as f64),
                Value::F64(x) => Ok(*x),
                Value::I32(x) => Ok(*x as f64),
                Value::U32(x) => Ok(*x as f64),
                Value::I64(x) => Ok(*x as f64),
                Value::U8(x) => Ok(*x as f64),
                Value::I8(x) => Ok(*x as f64),
                v => bail!(
                    "{}: `{key}[{i}]` should be a number, found {:?}",
                    self.path.display(),
                    v.value_type()
                ),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

/// Special-token ids and encoding flags: first the defaults of the model type
/// ([`build_model`]), then what the file's keys say ([`read_special_ids`]).
struct SpecialIds {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    escape_whitespaces: bool,
}

/// `tokenizer.ggml.model` (required) and `tokenizer.ggml.pre` (optional).
fn read_model_names(meta: &Meta) -> Result<(String, Option<String>)> {
    let model_name = meta
        .string("tokenizer.ggml.model")?
        .ok_or_else(|| {
            anyhow!(
                "{}: no `tokenizer.ggml.model` in the GGUF metadata",
                meta.path.display()
            )
        })?
        .to_string();
    let pre_name = meta.string("tokenizer.ggml.pre")?.map(str::to_string);
    Ok((model_name, pre_name))
}

/// The token texts (`tokenizer.ggml.tokens`: 1 to `u32::MAX` entries); an
/// empty text becomes `[EMPTY_i]`.
fn read_texts(meta: &Meta) -> Result<Vec<String>> {
    let texts_raw = meta.strings("tokenizer.ggml.tokens")?.ok_or_else(|| {
        anyhow!(
            "{}: no `tokenizer.ggml.tokens` in the GGUF metadata",
            meta.path.display()
        )
    })?;
    let n = texts_raw.len();
    if n == 0 || n > u32::MAX as usize {
        bail!(
            "{}: `tokenizer.ggml.tokens` has {n} entries",
            meta.path.display()
        );
    }
    Ok(texts_raw
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_string()
            }
        })
        .collect())
}

/// The score of each of the `n` tokens (`tokenizer.ggml.scores`, at least `n`
/// entries; 0 for all when absent).
fn read_scores(meta: &Meta, n: usize) -> Result<Vec<f32>> {
    Ok(match meta.numbers("tokenizer.ggml.scores")? {
        Some(s) if s.len() >= n => s.iter().take(n).map(|&x| x as f32).collect(),
        Some(s) => bail!(
            "{}: `tokenizer.ggml.scores` has {} entries for {n} tokens",
            meta.path.display(),
            s.len()
        ),
        None => vec![0.0; n],
    })
}

/// The attributes of each of the `n` tokens from `tokenizer.ggml.token_type`
/// (at least `n` entries; all normal when absent).
fn read_token_types(meta: &Meta, n: usize) -> Result<Vec<u32>> {
    Ok(match meta.numbers("tokenizer.ggml.token_type")? {
        Some(t) if t.len() >= n => t
            .iter()
            .take(n)
            .map(|&x| match x as i64 {
                1 => ATTR_NORMAL,
                2 => ATTR_UNKNOWN,
                3 => ATTR_CONTROL,
                4 => ATTR_USER_DEFINED,
                5 => ATTR_UNUSED,
                6 => ATTR_BYTE,
                _ => ATTR_UNDEFINED,
            })
            .collect(),
        Some(t) => bail!(
            "{}: `tokenizer.ggml.token_type` has {} entries for {n} tokens",
            meta.path.display(),
            t.len()
        ),
        None => vec![ATTR_NORMAL; n],
    })
}

/// The id of each token text; a duplicated text keeps its first id
/// (llama.cpp refuses such files).
fn index_texts(texts: &[String]) -> HashMap<String, u32> {
    let mut token_to_id = HashMap::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        token_to_id.entry(t.clone()).or_insert(i as u32);
    }
    token_to_id
}

/// `id` when it is one of the `n` tokens of the vocabulary.
fn in_vocab(id: u64, n: usize) -> Option<u32> {
    Some(id).filter(|&x| (x as usize) < n).map(|x| x as u32)
}

/// The `<0xXX>` token of byte `b`, if the vocabulary has one.
fn byte_hex_token(token_to_id: &HashMap<String, u32>, b: u8) -> Option<u32> {
    token_to_id.get(&format!("<0x{b:02X}>")).copied()
}

/// The encoding model `tokenizer.ggml.model` names, with the special ids and
/// flags llama.cpp defaults to for it (llama.cpp's `load`); any model type
/// but `gpt2`, `gemma4` and `llama` is an error.
fn build_model(
    meta: &Meta,
    model_name: &str,
    pre_name: Option<&str>,
    token_to_id: &HashMap<String, u32>,
    n: usize,
) -> Result<(Model, SpecialIds)> {
    match model_name {
        "gpt2" | "gemma4" => bpe_model(meta, model_name, pre_name, token_to_id),
        "llama" => Ok(spm_model(token_to_id, n)),
        other => bail!(
            "{}: unsupported tokenizer model `tokenizer.ggml.model` = {other:?} (supported: gpt2, gemma4, llama)",
            meta.path.display()
        ),
    }
}

/// The pre-tokenizer of a BPE vocabulary: Gemma 4's own for `gemma4`, else
/// the one `tokenizer.ggml.pre` names (required, and one of
/// [`PreKind::supported_names`]).
fn bpe_pre_kind(meta: &Meta, model_name: &str, pre_name: Option<&str>) -> Result<PreKind> {
    if model_name == "gemma4" {
        return Ok(PreKind::Gemma4);
    }
    let pre = pre_name.ok_or_else(|| {
        anyhow!(
            "{}: byte-level BPE vocabulary without `tokenizer.ggml.pre`; supported values: {}",
            meta.path.display(),
            PreKind::supported_names()
        )
    })?;
    PreKind::from_gguf_name(pre).ok_or_else(|| {
        anyhow!(
            "{}: unsupported pre-tokenizer `tokenizer.ggml.pre` = {pre:?} (supported: {})",
            meta.path.display(),
            PreKind::supported_names()
        )
    })
}

/// The merge ranks of `tokenizer.ggml.merges` (required): `"a b"` at rank
/// `r` merges the tokens `a` and `b` into `ab`. Entries naming a text the
/// vocabulary lacks are skipped; a repeated pair keeps its first rank.
fn read_merges(meta: &Meta, token_to_id: &HashMap<String, u32>) -> Result<bpe::Merges> {
    let merges_raw = meta.strings("tokenizer.ggml.merges")?.ok_or_else(|| {
        anyhow!(
            "{}: BPE vocabulary without `tokenizer.ggml.merges`",
            meta.path.display()
        )
    })?;
    let mut merges = bpe::Merges::with_capacity(merges_raw.len());
    for (rank, m) in merges_raw.iter().enumerate() {
        // Split at the first space after the first character.
        let cut = m
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c == ' ')
            .map(|(i, _)| i);
        let Some(cut) = cut else { continue };
        let (a, b) = (&m[..cut], &m[cut + 1..]);
        let (Some(&ia), Some(&ib)) = (token_to_id.get(a), token_to_id.get(b)) else {
            continue;
        };
        let Some(&ab) = token_to_id.get(&format!("{a}{b}")) else {
            continue;
        };
        merges.entry((ia, ib)).or_insert((rank as u32, ab));
    }
    Ok(merges)
}

/// The token of each single byte in a BPE vocabulary: the byte's GPT-2
/// character for byte-encoded pre-tokenizers, else its `<0xXX>` token.
fn bpe_byte_tokens(kind: PreKind, token_to_id: &HashMap<String, u32>) -> Box<[Option<u32>; 256]> {
    let mut byte_token = Box::new([None; 256]);
    if kind.byte_encoded() {
        let table = byte_level::byte_to_char_table();
        for b in 0..256 {
            byte_token[b] = token_to_id.get(&table[b].to_string()).copied();
        }
    } else {
        for b in 0..=255u8 {
            byte_token[b as usize] = byte_hex_token(token_to_id, b);
        }
    }
    byte_token
}

/// A BPE vocabulary (`gpt2`, `gemma4`): its pre-tokenizer, merges and byte
/// tokens; BOS added by default for Llama 3 and Gemma 4, whitespace escaped
/// (`▁`) for Gemma 4, no default special ids.
fn bpe_model(
    meta: &Meta,
    model_name: &str,
    pre_name: Option<&str>,
    token_to_id: &HashMap<String, u32>,
) -> Result<(Model, SpecialIds)> {
    let kind = bpe_pre_kind(meta, model_name, pre_name)?;
    let merges = read_merges(meta, token_to_id)?;
    let byte_token = bpe_byte_tokens(kind, token_to_id);
    let defaults = SpecialIds {
        bos: None,
        eos: None,
        unk: None,
        pad: None,
        eot: None,
        eom: None,
        add_bos: kind == PreKind::Llama3 || kind == PreKind::Gemma4,
        add_eos: false,
        add_space_prefix: false,
        escape_whitespaces: kind == PreKind::Gemma4,
    };
    let model = Model::Bpe {
        pre: pretokenize::PreTokenizer::new(kind)?,
        merges,
        byte_token,
    };
    Ok((model, defaults))
}

/// A SentencePiece vocabulary (`llama`) of `n` tokens: byte tokens `<0xXX>`
/// (else the byte's own character); BOS added, a space prefixed, whitespace
/// escaped by default, with BOS 1, EOS 2 and UNK 0 when the vocabulary has
/// them.
fn spm_model(token_to_id: &HashMap<String, u32>, n: usize) -> (Model, SpecialIds) {
    let mut byte_token = Box::new([None; 256]);
    for b in 0..=255u8 {
        byte_token[b as usize] = byte_hex_token(token_to_id, b)
            .or_else(|| token_to_id.get(&char::from(b).to_string()).copied());
    }
    let defaults = SpecialIds {
        bos: in_vocab(1, n),
        eos: in_vocab(2, n),
        unk: in_vocab(0, n),
        pad: None,
        eot: None,
        eom: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix: true,
        escape_whitespaces: true,
    };
    (Model::Spm { byte_token }, defaults)
}

/// The model type's `defaults` overridden by the file's keys
/// (`tokenizer.ggml.add_space_prefix`, the `*_token_id` keys, which must be
/// among the `n` tokens, `add_bos_token`, `add_eos_token`); Gemma 4 always
/// adds BOS. Adding BOS or EOS without its id is an error.
fn read_special_ids(
    meta: &Meta,
    model_name: &str,
    n: usize,
    defaults: SpecialIds,
) -> Result<SpecialIds> {
    let path = meta.path;
    let mut ids = defaults;
    if let Some(v) = meta.boolean("tokenizer.ggml.add_space_prefix")? {
        ids.add_space_prefix = v;
    }
    let id_key = |key: &str| -> Result<Option<u32>> {
        Ok(match meta.uint(key)? {
            Some(v) => Some(in_vocab(v, n).ok_or_else(|| {
                anyhow!(
                    "{}: `{key}` = {v} is outside the vocabulary of {n} tokens",
                    path.display()
                )
            })?),
            None => None,
        })
    };
    if let Some(v) = id_key("tokenizer.ggml.bos_token_id")? {
        ids.bos = Some(v);
    }
    if let Some(v) = id_key("tokenizer.ggml.eos_token_id")? {
        ids.eos = Some(v);
    }
    if let Some(v) = id_key("tokenizer.ggml.unknown_token_id")? {
        ids.unk = Some(v);
    }
    ids.pad = id_key("tokenizer.ggml.padding_token_id")?;
    ids.eot = id_key("tokenizer.ggml.eot_token_id")?;
    ids.eom = id_key("tokenizer.ggml.eom_token_id")?;
    if let Some(v) = meta.boolean("tokenizer.ggml.add_bos_token")? {
        ids.add_bos = v;
    }
    ids.add_eos = meta
        .boolean("tokenizer.ggml.add_eos_token")?
        .unwrap_or(false);
    if model_name == "gemma4" {
        // llama.cpp forces BOS for Gemma 4 whatever the file says.
        ids.add_bos = true;
    }
    if ids.add_bos && ids.bos.is_none() {
        bail!(
            "{}: `tokenizer.ggml.add_bos_token` is true but no BOS token id is set",
            path.display()
        );
    }
    if ids.add_eos && ids.eos.is_none() {
        bail!(
            "{}: `tokenizer.ggml.add_eos_token` is true but no EOS token id is set",
            path.display()
        );
    }
    Ok(ids)
}

/// End-of-generation tokens: those found by text as llama.cpp does (marked
/// control tokens whatever the file says) and EOS, EOT and EOM; in Gemma 4's
/// vocabulary (`<|tool_response>` ends generation) `</s>` is an ordinary
/// token instead.
fn end_of_generation(
    token_to_id: &HashMap<String, u32>,
    attrs: &mut [u32],
    ids: &SpecialIds,
) -> BTreeSet<u32> {
    let mut eog = BTreeSet::new();
    for t in FIM_EOG_TEXTS.iter().chain(EOG_TEXTS) {
        if let Some(&id) = token_to_id.get(*t) {
            eog.insert(id);
            attrs[id as usize] |= ATTR_CONTROL;
        }
    }
    for id in [ids.eos, ids.eot, ids.eom].into_iter().flatten() {
        eog.insert(id);
    }
    // Gemma 4: `</s>` is an ordinary token there.
    if let (Some(&tr), Some(&s)) = (token_to_id.get("<|tool_response>"), token_to_id.get("</s>")) {
        if eog.contains(&tr) && eog.remove(&s) {
            attrs[s as usize] = ATTR_NORMAL;
        }
    }
    eog
}

/// Control tokens named "unused..." are unused.
fn mark_unused(texts: &[String], attrs: &mut [u32]) {
    for (i, t) in texts.iter().enumerate() {
        if attrs[i] & ATTR_CONTROL != 0 && t.contains("unused") {
            attrs[i] |= ATTR_UNUSED;
        }
    }
}

/// The bytes each token stands for: special tokens their text, normal tokens
/// their text decoded (GPT-2 characters for byte-encoded BPE, `▁` as a space
/// otherwise), byte tokens their byte, the rest nothing.
fn bytes_of_tokens(model: &Model, texts: &[String], attrs: &[u32]) -> Vec<Vec<u8>> {
    let char_to_byte: HashMap<char, u8> = byte_level::byte_to_char_table()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect();
    let byte_level_text = matches!(model, Model::Bpe { pre, .. } if pre.kind().byte_encoded());
    texts
        .iter()
        .zip(attrs)
        .map(|(t, &a)| {
            if a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
                t.as_bytes().to_vec()
            } else if a & ATTR_NORMAL != 0 {
                if byte_level_text {
                    byte_level::decode_token_text(t, &char_to_byte)
                } else {
                    t.replace('▁', " ").into_bytes()
                }
            } else if a & ATTR_BYTE != 0 {
                parse_byte_token(t).map(|b| vec![b]).unwrap_or_default()
            } else {
                Vec::new()
            }
        })
        .collect()
}

/// The special tokens (control, user-defined, unknown), longest text first
/// (ties by id), and a matcher finding their texts (none when there are no
/// special tokens).
fn special_tokens(
    texts: &[String],
    attrs: &[u32],
    path: &Path,
) -> Result<(Vec<u32>, Option<aho_corasick::AhoCorasick>)> {
    let mut special: Vec<u32> = (0..texts.len() as u32)
        .filter(|&i| attrs[i as usize] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0)
        .collect();
    special.sort_by(|&a, &b| {
        texts[b as usize]
            .len()
            .cmp(&texts[a as usize].len())
            .then(a.cmp(&b))
    });
    let special_finder = if special.is_empty() {
        None
    } else {
        Some(
            aho_corasick::AhoCorasick::new(special.iter().map(|&i| texts[i as usize].as_str()))
                .with_context(|| {
                    format!("{}: building the special-token matcher", path.display())
                })?,
        )
    };
    Ok((special, special_finder))
}

enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

impl Tokenizer {
    /// Read the tokenizer of a GGUF file (metadata only; tensors are not
    /// loaded), through Joule's safe GGUF reader.
    pub fn from_gguf_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let content = crate::inference::files::gguf_weights::read_content(path)?;
        Self::from_gguf_content(&content, path)
    }

    /// Build the tokenizer from already-read GGUF content; `path_for_errors`
    /// only names the file in error messages.
    pub fn from_gguf_content(
        content: &Content,
        path_for_errors: impl AsRef<Path>,
    ) -> Result<Tokenizer> {
        let path = path_for_errors.as_ref();
        let meta = Meta {
            md: &content.metadata,
            path,
        };
        let (model_name, pre_name) = read_model_names(&meta)?;
        let texts = read_texts(&meta)?;
        let n = texts.len();
        let scores = read_scores(&meta, n)?;
        let mut attrs = read_token_types(&meta, n)?;
        let token_to_id = index_texts(&texts);
        let (model, defaults) =
            build_model(&meta, &model_name, pre_name.as_deref(), &token_to_id, n)?;
        let ids = read_special_ids(&meta, &model_name, n, defaults)?;
        let eog = end_of_generation(&token_to_id, &mut attrs, &ids);
        mark_unused(&texts, &mut attrs);
        let bytes = bytes_of_tokens(&model, &texts, &attrs);
        let (special, special_finder) = special_tokens(&texts, &attrs, path)?;
        Ok(Tokenizer {
            source: path.to_path_buf(),
            model_name,
            pre_name,
            model,
            texts,
            bytes,
            attrs,
            scores,
            token_to_id,
            bos: ids.bos,
            eos: ids.eos,
            unk: ids.unk,
            pad: ids.pad,
            add_bos: ids.add_bos,
            add_eos: ids.add_eos,
            add_space_prefix: ids.add_space_prefix,
            escape_whitespaces: ids.escape_whitespaces,
            eog,
            special,
            special_finder,
            hf: None,
        })
    }

    /// The tokenizer of a model file: its GGUF metadata, and, when a
    /// `tokenizer.json` sits beside the file, that file for encoding (see
    /// [`hf_json`]).
    pub fn for_model_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        Self::beside(Self::from_gguf_file(path)?, path)
    }

    /// [`Tokenizer::for_model_file`] from a model file already opened (and
    /// its header parsed) for loading the weights.
    pub fn for_gguf(gguf: &crate::inference::files::gguf_weights::GgufFile) -> Result<Tokenizer> {
        Self::beside(
            Self::from_gguf_content(gguf.content(), gguf.path())?,
            gguf.path(),
        )
    }

    fn beside(tok: Tokenizer, path: &Path) -> Result<Tokenizer> {
        match hf_json::HfEncoder::beside(path) {
            Some(json) => tok.with_tokenizer_json(&json),
            None => Ok(tok),
        }
    }

    /// Encode with a Hugging Face `tokenizer.json` from now on (ids, special
    /// tokens and decoding stay those of the GGUF vocabulary, which the file
    /// must agree with).
    pub fn with_tokenizer_json(mut self, path: &Path) -> Result<Tokenizer> {
        let hf = hf_json::HfEncoder::load(path)?;
        hf.check_against(&self)?;
        self.hf = Some(hf);
        Ok(self)
    }

    /// The `tokenizer.json` used for encoding, if any.
    pub fn tokenizer_json(&self) -> Option<&Path> {
        self.hf.as_ref().map(|h| h.path.as_path())
    }

    /// The file this tokenizer was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }
    /// `tokenizer.ggml.model` (`gpt2`, `gemma4`, `llama`).
    pub fn model_name(&self) -> &str {
        &self.model_name
    }
    /// `tokenizer.ggml.pre`, when the file has one.
    pub fn pre_name(&self) -> Option<&str> {
        self.pre_name.as_deref()
    }
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }
    /// Whether `encode(.., add_special = true, ..)` puts BOS first.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    /// Whether `encode(.., add_special = true, ..)` puts EOS last.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// Every token that ends generation, ascending: EOS, end-of-turn tokens
    /// (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `<turn|>`, ...), and the
    /// fill-in-the-middle tokens llama.cpp also stops on.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eog.iter().copied().collect()
    }
    pub fn is_eos(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }
    /// The id of the vocabulary entry spelled exactly `text` (as stored in the
    /// GGUF: `<|im_end|>`, or `Ġthe` for byte-level vocabularies).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
    /// The vocabulary entry's text as stored in the GGUF.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }
    /// The raw bytes a token stands for in decoded text (its own text for
    /// control and user-defined tokens; empty for unused ids and ids outside
    /// the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
    /// The SentencePiece score of a token (0 where the file has none).
    pub fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
    pub fn kind(&self, id: u32) -> TokenKind {
        let a = self
            .attrs
            .get(id as usize)
            .copied()
            .unwrap_or(ATTR_UNDEFINED);
        if a & ATTR_CONTROL != 0 {
            TokenKind::Control
        } else if a & ATTR_USER_DEFINED != 0 {
            TokenKind::UserDefined
        } else if a & ATTR_UNKNOWN != 0 {
            TokenKind::Unknown
        } else if a & ATTR_BYTE != 0 {
            TokenKind::Byte
        } else if a & ATTR_UNUSED != 0 {
            TokenKind::Unused
        } else if a & ATTR_NORMAL != 0 {
            TokenKind::Normal
        } else {
            TokenKind::Undefined
        }
    }
    /// Whether a token is not plain text: control, user-defined, unknown,
    /// unused or undefined (everything except normal and byte tokens).
    pub fn is_special(&self, id: u32) -> bool {
        !matches!(self.kind(id), TokenKind::Normal | TokenKind::Byte)
    }
    /// Whether `decode(.., skip_special = true)` drops this token (control
    /// and unknown tokens, as llama.cpp's detokenizer).
    pub fn is_skipped_when_decoding(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a & (ATTR_CONTROL | ATTR_UNKNOWN) != 0)
    }

    /// Tokenize `text`. `add_special` puts BOS/EOS around it where the
    /// vocabulary asks for them; `parse_special` lets control tokens written
    /// in the text (`<|im_start|>`) become their ids.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(self.bos.context("add_bos without a BOS id")?);
        }
        if let Some(hf) = &self.hf {
            out.extend(hf.encode(text, parse_special)?);
            if add_special && self.add_eos {
                out.push(self.eos.context("add_eos without an EOS id")?);
            }
            return Ok(out);
        }
        let fragments = self.partition(text, parse_special);
        match &self.model {
            Model::Bpe {
                pre,
                merges,
                byte_token,
            } => {
                for f in fragments {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(t) => {
                            let escaped;
                            let t = if self.escape_whitespaces {
                                escaped = t.replace(' ', "▁");
                                escaped.as_str()
                            } else {
                                t
                            };
                            self.bpe_fragment(t, pre, merges, byte_token, &mut out)
                                .with_context(|| {
                                    format!("tokenizing with {}", self.source.display())
                                })?;
                        }
                    }
                }
            }
            Model::Spm { byte_token } => {
                let mut prev_special = true;
                for f in fragments {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 1);
                            if self.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(t);
                            let s = s.replace(' ', "▁");
                            self.spm_fragment(&s, byte_token, &mut out);
                            prev_special = false;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(self.eos.context("add_eos without an EOS id")?);
        }
        Ok(out)
    }

    /// Detokenize. With `skip_special`, control and unknown tokens are left
    /// out (user-defined ones such as `<think>` stay). Invalid UTF-8 becomes
    /// U+FFFD. For SentencePiece vocabularies that prefix a space when
    /// encoding, the first piece's leading space is removed, so that
    /// `decode(encode(x)) == x`. No other clean-up is applied.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut buf = Vec::new();
        let mut strip = self.strips_leading_space();
        for &id in ids {
            if let Some(p) = self.piece_for_decode(id, skip_special, &mut strip) {
                buf.extend_from_slice(p);
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Whether decoding removes one leading space (SentencePiece with
    /// `add_space_prefix`).
    fn strips_leading_space(&self) -> bool {
        matches!(self.model, Model::Spm { .. }) && self.add_space_prefix
    }

    /// The bytes one token adds to decoded text, updating the "strip the
    /// leading space" state: the first piece that is not BOS loses one
    /// leading space when `strip` is set.
    fn piece_for_decode(&self, id: u32, skip_special: bool, strip: &mut bool) -> Option<&[u8]> {
        if skip_special && self.is_skipped_when_decoding(id) {
            return None;
        }
        let mut p = self.token_bytes(id);
        if *strip && Some(id) != self.bos {
            if p.first() == Some(&b' ') {
                p = &p[1..];
            }
            *strip = false;
        }
        Some(p)
    }

    /// Cut the text at special tokens, longest token text first, as
    /// llama.cpp's `tokenizer_st_partition`.
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(text));
        let Some(finder) = &self.special_finder else {
            return frags;
        };
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        if present.is_empty() {
            return frags;
        }
        present.sort_unstable();
        present.dedup();
        for idx in present {
            let id = self.special[idx];
            if !parse_special && self.attrs[id as usize] & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let needle = self.texts[id as usize].as_str();
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Token(_) => next.push(f),
                    Fragment::Text(t) => {
                        let mut last = 0;
                        for (pos, _) in t.match_indices(needle) {
                            if pos > last {
                                next.push(Fragment::Text(&t[last..pos]));
                            }
                            next.push(Fragment::Token(id));
                            last = pos + needle.len();
                        }
                        if last < t.len() {
                            next.push(Fragment::Text(&t[last..]));
                        }
                    }
                }
            }
            frags = next;
        }
        frags
    }

    fn bpe_fragment(
        &self,
        text: &str,
        pre: &pretokenize::PreTokenizer,
        merges: &bpe::Merges,
        byte_token: &[Option<u32>; 256],
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let kind = pre.kind();
        let byte_encoded = kind.byte_encoded();
        let table = if byte_encoded && kind.ignore_merges() {
            Some(byte_level::byte_to_char_table())
        } else {
            None
        };
        for word in pre.split(text)? {
            // Whole words that are vocabulary entries skip the merges (Llama 3),
            // and so do newline runs in Gemma 4.
            let whole = if let Some(table) = &table {
                let enc: String = word.bytes().map(|b| table[b as usize]).collect();
                self.token_to_id.get(&enc).copied()
            } else if kind == PreKind::Gemma4 && word.bytes().all(|b| b == b'\n') {
                self.token_to_id.get(word).copied()
            } else {
                None
            };
            if let Some(id) = whole {
                out.push(id);
                continue;
            }
            let symbols: Vec<bpe::Symbol> = if byte_encoded {
                word.bytes()
                    .enumerate()
                    .map(|(i, b)| bpe::Symbol::new(i, 1, byte_token[b as usize]))
                    .collect()
            } else {
                word.char_indices()
                    .map(|(i, c)| {
                        let s = &word[i..i + c.len_utf8()];
                        bpe::Symbol::new(i, s.len(), self.token_to_id.get(s).copied())
                    })
                    .collect()
            };
            for s in bpe::merge(symbols, merges) {
                match s.id {
                    Some(id) => out.push(id),
                    None => {
                        // Spell the piece byte by byte.
                        for &b in &word.as_bytes()[s.start..s.start + s.len] {
                            if let Some(id) = byte_token[b as usize] {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn spm_fragment(&self, text: &str, byte_token: &[Option<u32>; 256], out: &mut Vec<u32>) {
        let lookup = |s: &str| {
            self.token_to_id
                .get(s)
                .map(|&id| (id, self.scores[id as usize]))
        };
        for (start, len) in spm::segment(text, lookup) {
            let piece = &text[start..start + len];
            match self.token_to_id.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        if let Some(id) = byte_token[b as usize].or(self.unk) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }
}

/// The byte of a `<0xXX>` token.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests;
