#!/usr/bin/env python3
"""Expected token ids computed with Hugging Face's `tokenizers` library (an
independent BPE implementation), in llama.cpp's `.out` format, for the Rust
tests of src/inference/text/tokenizer:
- tests/fixtures/tokenizers/ggml-vocab-{qwen35,gemma-4}.gguf.out: llama.cpp's
  qwen2 test inputs under vocabularies llama.cpp ships no vectors for (for
  Gemma 4 the pipeline mirrors llama.cpp's: U+2581 for spaces, cut at newline
  runs, BPE on raw UTF-8 with <0xXX> byte fallback);
- tests/fixtures/tokenizers/extra.inp and <vocab>.extra.out: more inputs
  (scripts with combining marks, CJK, JSON, emoji sequences) for every
  byte-level vocabulary.

The Hugging Face pipeline is rebuilt from the GGUF's vocabulary and merges
with the pre-tokenizer regex of the model's tokenizer.json. Before writing
anything, the same construction is checked against llama.cpp's own qwen2
vectors, so the script cannot silently drift from llama.cpp's expectations.

Usage (from the repository root): pip install gguf tokenizers && python3 scripts/gen_tokenizer_fixtures.py
"""
import os
import sys

from gguf import GGUFReader
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "tokenizers")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")

# Pre-tokenizer regexes as in the models' tokenizer.json files.
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN35 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def field(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def byte_level_bpe(gguf_path, pattern, ignore_merges):
    r = GGUFReader(gguf_path)
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = field(r, "tokenizer.ggml.merges")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (1, 6)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def gemma4_bpe(gguf_path):
    """Gemma 4 as llama.cpp runs it: spaces written as U+2581, text cut at
    newline runs only, BPE over raw UTF-8 with <0xXX> byte fallback."""
    from tokenizers import normalizers
    r = GGUFReader(gguf_path)
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = field(r, "tokenizer.ggml.merges")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (1, 6)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, byte_fallback=True, ignore_merges=False))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated", invert=False)
    return tok


def read_inputs(path):
    raw = open(path, encoding="utf-8", newline="").read()
    sep = "\n__ggml_vocab_test__\n"
    parts = raw.split(sep)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def read_outputs(path):
    return [[int(x) for x in line.split()] for line in open(path, encoding="utf-8").read().splitlines()]


def encode_all(tok, inputs):
    return [tok.encode(s, add_special_tokens=False).ids for s in inputs]


EXTRA_INPUTS = [
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "สวัสดีครับ ยินดีต้อนรับ",
    "cafe\u0301 na\u0308ive re\u0301sume\u0301",
    "Tiếng Việt có dấu: người, được, những.",
    "{\"job\": 3, \"reason\": \"I'LL take it\"}\n\n\t  x",
    "Energy: 12.5 -> 7.25 (cost 0.015*120*sqrt(8))",
    "<|im_start|>user\nhi<|im_end|>",
    "   leading and trailing   \n\n\n",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "emoji 👩‍👩‍👧‍👦 family 🇫🇷 flag",
]

CONFIGS = [
    # (vocab file, tokenizer.json regex, ignore_merges)
    ("ggml-vocab-qwen2.gguf", QWEN2, False),
    ("ggml-vocab-qwen35.gguf", QWEN35, False),
    ("ggml-vocab-llama-bpe.gguf", LLAMA3, True),
    ("ggml-vocab-gpt-2.gguf", GPT2, False),
    ("ggml-vocab-gemma-4.gguf", None, False),
]


def write_out(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((" " + " ".join(map(str, row)) if row else "") + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    sep = "\n__ggml_vocab_test__\n"
    with open(os.path.join(OUT, "extra.inp"), "w", encoding="utf-8", newline="") as f:
        f.write("".join(s + sep for s in EXTRA_INPUTS))
    qwen2_inputs = read_inputs(os.path.join(DATA, "ggml-vocab-qwen2.gguf.inp"))
    for vocab, pattern, ignore_merges in CONFIGS:
        if pattern is None:
            tok = gemma4_bpe(os.path.join(DATA, vocab))
        else:
            tok = byte_level_bpe(os.path.join(DATA, vocab), pattern, ignore_merges)
        ref_out = os.path.join(DATA, vocab + ".out")
        if os.path.exists(ref_out):
            # Check the construction on llama.cpp's own vectors first.
            inputs = read_inputs(os.path.join(DATA, vocab + ".inp"))
            want = read_outputs(ref_out)
            got = encode_all(tok, inputs)
            bad = [(s, w, g) for s, w, g in zip(inputs, want, got) if w != g]
            if len(want) != len(inputs) or bad:
                for s, w, g in bad:
                    print(f"{vocab} mismatch on {s!r}:\n want {w}\n got  {g}", file=sys.stderr)
                sys.exit(f"the HF construction does not reproduce llama.cpp's {vocab} vectors; not writing fixtures")
        else:
            # No llama.cpp vectors: write ours for llama.cpp's qwen2 inputs.
            rows = encode_all(tok, qwen2_inputs)
            write_out(os.path.join(OUT, vocab + ".out"), rows)
        rows = encode_all(tok, EXTRA_INPUTS)
        write_out(os.path.join(OUT, vocab + ".extra.out"), rows)
        print(f"{vocab}: ok", file=sys.stderr)


if __name__ == "__main__":
    main()
