#!/usr/bin/env python3
"""Golden logits for Joule's GGUF model code.

Builds tiny random-weight llama, qwen2, qwen3 and gemma3 models with
transformers (fixed seed), writes each as an F32 GGUF with llama.cpp's
tensor names and metadata (gguf-py), and saves transformers' logits for a
fixed token sequence. The Rust tests (tests/quick/golden_logits.rs) load the GGUF
files and compare their logits, for a one-shot prefill and for incremental
decoding through the KV cache, with these.

Usage: pip install torch transformers gguf numpy
       python3 scripts/gen_golden_logits.py tests/fixtures/golden
"""
import json
import os
import sys

import numpy as np
import torch
import gguf
import transformers

SEED = 1234
VOCAB = 128
TOKENS = [1, 17, 99, 5, 64, 3, 120, 42, 42, 7, 88, 31]


def randomize(model, std=0.15, norm_center=1.0):
    """Replace every parameter with seeded random values (norms near norm_center)."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(norm_center + 0.3 * (torch.rand(p.shape, generator=g) - 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def permute_llama(w, n_head):
    # llama.cpp's convert_hf_to_gguf stores llama q/k rows in the interleaved rotary order.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def common_meta(w, arch, cfg, head_dim):
    w.add_name(f"joule-golden-{arch}")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)


def rope_theta(cfg, default):
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        if "rope_theta" in rp:
            return rp["rope_theta"]
        if "full_attention" in rp:
            return rp["full_attention"]["rope_theta"]
    return getattr(cfg, "rope_theta", default)


def write_gguf(path, arch, model, cfg, head_dim, extra_meta, norm_plus_one=False, permute=False, tied=False):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path, arch)
    common_meta(w, arch, cfg, head_dim)
    extra_meta(w)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight" if arch == "gemma3" else "ffn_norm.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for k in sorted(sd):
        v = sd[k]
        if k in names:
            out = names[k]
            if tied and out == "output.weight":
                continue
        else:
            parts = k.split(".")
            assert parts[0] == "model" and parts[1] == "layers", k
            rest = ".".join(parts[3:])
            out = f"blk.{parts[2]}.{per_layer[rest]}"
            if permute and rest == "self_attn.q_proj.weight":
                v = permute_llama(v, cfg.num_attention_heads)
            if permute and rest == "self_attn.k_proj.weight":
                v = permute_llama(v, cfg.num_key_value_heads)
        if norm_plus_one and out.endswith("norm.weight"):
            v = v + 1.0
        w.add_tensor(out, np.ascontiguousarray(v.astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def logits_of(model):
    with torch.no_grad():
        out = model(torch.tensor([TOKENS]), use_cache=False)
    return out.logits[0].float().numpy()


def build(arch):
    torch.manual_seed(SEED)
    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        max_position_embeddings=256, rms_norm_eps=1e-6,
    )
    if arch == "llama":
        cfg = transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                                       tie_word_embeddings=False, **common)
        model = transformers.LlamaForCausalLM(cfg)
        randomize(model)
        hd = 16
        meta = lambda w: w.add_rope_freq_base(rope_theta(cfg, 10000.0))
        kw = dict(permute=True)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
                                       tie_word_embeddings=True, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
        randomize(model)
        hd = 16
        meta = lambda w: w.add_rope_freq_base(rope_theta(cfg, 1000000.0))
        kw = dict(tied=True)
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                       rope_theta=1000000.0, tie_word_embeddings=False, **common)
        model = transformers.Qwen3ForCausalLM(cfg)
        randomize(model)
        hd = 32
        meta = lambda w: w.add_rope_freq_base(rope_theta(cfg, 1000000.0))
        kw = {}
    elif arch == "gemma3":
        cfg = transformers.Gemma3TextConfig(
            num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"],
            rope_theta=1000000.0, rope_local_base_freq=10000.0, hidden_activation="gelu_pytorch_tanh",
            final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True,
            **common)
        cfg._attn_implementation = "eager"
        model = transformers.Gemma3ForCausalLM(cfg)
        # Gemma's RMSNorm multiplies by (1 + w): centre w on 0; the GGUF stores 1 + w.
        randomize(model, norm_center=0.0)
        hd = 32

        def meta(w):
            w.add_rope_freq_base(1000000.0)
            w.add_sliding_window(4)
            w.add_uint32("gemma3.attention.sliding_window_pattern", 2)
            w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
        kw = dict(norm_plus_one=True, tied=True)
    else:
        raise ValueError(arch)
    model.eval()
    return model, cfg, hd, meta, kw


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/golden"
    os.makedirs(out_dir, exist_ok=True)
    for arch in ["llama", "qwen2", "qwen3", "gemma3"]:
        model, cfg, hd, meta, kw = build(arch)
        path = os.path.join(out_dir, f"{arch}.gguf")
        write_gguf(path, arch, model, cfg, hd, meta, **kw)
        logits = logits_of(model)
        with open(os.path.join(out_dir, f"{arch}.logits.json"), "w") as f:
            json.dump({
                "arch": arch,
                "generator": f"transformers {transformers.__version__}, torch {torch.__version__}",
                "tokens": TOKENS,
                "logits": [[float(x) for x in row] for row in logits],
            }, f)
        print(arch, os.path.getsize(path), "bytes", "logit range", float(logits.min()), float(logits.max()))


if __name__ == "__main__":
    main()
