#!/usr/bin/env python3
"""Write a real-width dense `llama` GGUF in f16 with random weights, for benchmarks.

Qwen3-8B's widths (hidden 4096, FFN 12288, 32 query heads and 8 key/value heads of 128,
vocabulary 151,936) but only a few layers (default 4), weights drawn from N(0, 0.02²). The
tokenizer is the default model's (SmolLM2's byte-level BPE) with the vocabulary padded by unused
tokens to 151,936, so both llama.cpp and Joule load the file. Quantise it with
`llama-quantize OUT.f16.gguf OUT.Q4_K_M.gguf Q4_K_M` (scripts/make-real-width-model.sh does
both and caches the result outside the repository).

Usage: make-real-width-model.py GGUF_PY_DIR TOKENIZER_GGUF OUT [LAYERS]
"""
import sys

import numpy as np


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    sys.path.insert(0, sys.argv[1])
    from gguf import GGUFReader, GGUFValueType, GGUFWriter  # noqa: E402

    tok_src, out = sys.argv[2], sys.argv[3]
    layers = int(sys.argv[4]) if len(sys.argv) == 5 else 4
    hidden, ffn, heads, kv_heads, head_dim, vocab = 4096, 12288, 32, 8, 128, 151936

    reader = GGUFReader(tok_src)

    def field(name):
        f = reader.fields[name]
        if f.types[0] == GGUFValueType.ARRAY:
            if f.types[1] == GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [int(f.parts[i][0]) for i in f.data]
        if f.types[0] == GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    pad = vocab - len(tokens)
    tokens += [f"<|unused_{i}|>" for i in range(pad)]
    types += [5] * pad  # llama.cpp's LLAMA_TOKEN_TYPE_UNUSED

    w = GGUFWriter(out, "llama")
    w.add_name(f"real-width-{layers}L")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(vocab)
    w.add_file_type(1)  # MOSTLY_F16
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(field("tokenizer.ggml.merges"))
    w.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    w.add_add_bos_token(False)

    rng = np.random.default_rng(27)

    def mat(rows, cols):
        # ggml shapes are [cols, rows]; numpy's [rows, cols] row major is the same bytes.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", mat(vocab, hidden))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(heads * head_dim, hidden))
        w.add_tensor(p + "attn_k.weight", mat(kv_heads * head_dim, hidden))
        w.add_tensor(p + "attn_v.weight", mat(kv_heads * head_dim, hidden))
        w.add_tensor(p + "attn_output.weight", mat(hidden, heads * head_dim))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_down.weight", mat(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    w.add_tensor("output.weight", mat(vocab, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
