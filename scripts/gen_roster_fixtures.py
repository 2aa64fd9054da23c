#!/usr/bin/env python3
"""Golden fixtures for the roster architectures: qwen35, nemotron_h, gemma4, qwen3.

For each architecture this script

  1. trains a tiny tokenizer (byte-level BPE for qwen35 / nemotron_h / qwen3,
     an SPM-style "▁" BPE with <0xXX> byte fallback for gemma4) on a fixed
     text, with the special tokens the real chat templates use, and writes the
     real chat template (../shared/data/chat-templates/) into
     tokenizer_config.json;
  2. builds a tiny random-weight model from the transformers 5.x classes
     (Qwen3_5ForCausalLM / qwen3_5_text, NemotronHForCausalLM (dense),
     Gemma4ForCausalLM / gemma4_text, Qwen3ForCausalLM), seeded, and saves it
     as an HF checkpoint in a temporary directory;
  3. converts that checkpoint with llama.cpp's own convert_hf_to_gguf.py (the
     tree given by --llama-cpp, its gguf-py on sys.path) to f32 and q8_0;
  4. writes transformers' reference logits (float32, eval mode, no cache) at
     every position for a 100-token sequence and for a 37- and a 53-token
     sequence, as .npy [n_ids, vocab] float32, with a JSON sidecar holding
     the ids, the HF config and a few tokenizer checks;
  5. lists every GGUF (metadata and tensor table, ggml dimension order) into
     a text file beside it (NAME.gguf.txt);
  6. writes NAME.q8_0.logits.main.npy: the logits of the transformers model
     with the q8_0 file's Q8_0 tensors dequantized into it;
  7. for qwen35 also writes qwen35.ollama.f32.gguf: the same model in the
     layout of Ollama's converter (see OLLAMA LAYOUT below).

Usage:
    python3 scripts/gen_roster_fixtures.py --llama-cpp /work/ext/llama.cpp tests/fixtures/roster

Needs torch, transformers 5.x (tested with 5.24.0), tokenizers, safetensors,
numpy, and the llama.cpp tree (tested with de3ff81, as bundled in
node-llama-cpp 3.22.1).  Runs on the CPU in about a minute; deterministic
(fixed seeds, single-threaded torch).

THE CONVERTER WRAPPER
    The converter is run unmodified, in a subprocess (this file re-invoked
    with the hidden first argument __convert__), with two narrow monkeypatches
    of conversion/base.py:
    1. TextModel.get_vocab_base_pre hashes the tokenization of a probe string
       to recognise known BPE pre-tokenizers and raises NotImplementedError
       for unknown ones, which any freshly trained tokenizer is.  The wrapper
       calls the original and, only when it raises, returns the name the real
       model's GGUF carries:
         qwen35     -> "qwen35"   (our tokenizer uses Qwen3.5's split regex)
         qwen3      -> "qwen2"    (what llama.cpp writes for Qwen3's tokenizer;
                                   ours uses the same Qwen2 split regex)
         nemotron_h -> "pixtral"  (what llama.cpp writes for the Nemotron-3
                                   tokenizer; llama.cpp treats it as the
                                   Llama-3 regex, which our tokenizer uses)
       gemma4 does not use it (Gemma4Model.set_vocab goes through
       LlamaHfVocab and writes tokenizer model "gemma4").
    2. nemotron_h only: ModelBase.load_hparams returns config.json as written.
       The converter normally loads AutoConfig(...).to_dict(); with
       transformers 5.x that re-adds NemotronHConfig's MoE defaults
       (num_experts_per_tok, ...), and the converter classifies any config
       holding num_experts_per_tok as "nemotron_h_moe".  Reading config.json
       directly is the converter's own fallback (taken whenever AutoConfig
       fails, as it did for Nemotron-H under transformers 4.x, which is how
       NVIDIA's GGUFs were made).  The script asserts the result says
       general.architecture == "nemotron_h".

CONVERTER-FACING CONFIG EDITS (config.json after save_pretrained)
    qwen35:     "full_attention_interval": 4 and "mtp_num_hidden_layers": 1
                are added (the real Qwen3.5 config.json has both; transformers
                does not re-save the first).  One MTP layer ("mtp.*" tensors,
                random, in Qwen3.5's checkpoint naming) is added to the
                safetensors, as in the real checkpoints, so the llama.cpp file
                has block_count 9 = 8 + nextn_predict_layers 1 and a
                blk.8.nextn.* block that generation must skip.
    nemotron_h: every MoE key transformers 5.x writes (num_experts_per_tok,
                n_routed_experts, ...) is deleted, and the list
                "layers_block_type" is replaced by the string
                "hybrid_override_pattern": "M-M*-MM*-M-" plus
                "num_hidden_layers": 11, as in NVIDIA's own config.json files
                (with a list-valued pattern the converter counts only "moe"
                entries as FFN layers, so a dense list would give an all-zero
                feed_forward_length array).
    gemma4:     none.
    qwen3:      none.

CHECKS
    The script asserts: the saved checkpoint reloads to identical logits; a
    37-token prefix run equals the first 37 rows of the 100-token run (float64
    twin of the model); every tensor of each f32 GGUF equals the checkpoint
    tensor under the documented transform (to_gguf below); the Ollama-layout
    text tensors equal the llama.cpp ones; the tokenizer checks round-trip;
    Nemotron's softplus(dt) stays above time_step_min (transformers clamps
    there in the chunked scan only).  It also writes a q8_0 reference: the
    transformers model with the q8_0 GGUF's Q8_0 tensors dequantized.

OLLAMA LAYOUT (qwen35.ollama.f32.gguf)
    Ollama's Qwen3.5 converter is convert/convert_qwen3next.go in
    ollama/ollama (there is no convert_qwen35.go on main; a branch commit
    cc669fe7 had one, never merged).  The files in Ollama's library
    (qwen3.5:4b, :9b; published March 2026) were made by the version added in
    da70c322 (2026-02-24, "model: support for qwen3.5 architecture"), which is
    unchanged until 9db4bdba (2026-05-29), after which Ollama writes
    llama.cpp's layout instead.  We reproduce the da70c322 version, as if it
    had converted a Qwen3_5ForConditionalGeneration checkpoint of this model
    (that converter does not accept Qwen3_5ForCausalLM):
      * tensors come from the HF weights with Ollama's renames
        (model.language_model.layers -> blk, linear_attn.dt_bias -> ssm_dt:
        no ".bias" suffix; linear_attn.A_log -> ssm_a; mtp.* and the vision
        tower model.visual.* -> v.* are kept);
      * the same value transforms as llama.cpp: +1 on every "*_norm.weight"
        except ssm_norm, ssm_a = -exp(A_log), conv1d squeezed, and the same
        grouped-to-tiled value-head reorder (ssm.v_head_reordered = true) of
        attn_qkv's V rows, attn_gate rows, ssm_alpha/ssm_beta rows, ssm_dt,
        ssm_a, ssm_conv1d's V channels and ssm_out's columns.  So every text
        tensor is bit-identical to the llama.cpp file's (asserted), and the
        same reference logits apply;
      * metadata: block_count 8 (MTP layers are not counted and there is no
        nextn_predict_layers key); per-layer attention.head_count_kv array;
        mrope_sections, rope.mrope_section and rope.dimension_sections all
        the 3-entry [3, 3, 2]; rope.mrope_interleaved; ssm.v_head_reordered;
        vision.* keys and image/vision token ids; Ollama's tokenizer keys
        (scores = token id, add_*_token written false when absent,
        eos_token_ids from generation_config.json); keys sorted, tensors
        sorted by (block, name);
      * the MTP tensors keep the checkpoint name with Ollama's substring
        renames (mtp.fc.weight, mtp.layers.0.attn_q.weight, ...), and "+1"
        applies to those ending in "_norm.weight" (attn_norm,
        post_attention_norm, attn_q_norm, attn_k_norm) but not to mtp.norm,
        mtp.pre_fc_norm_embedding or mtp.pre_fc_norm_hidden;
      * the vision tower is a tiny random Qwen3_5VisionModel (depth 1): it is
        there to be skipped, not run;
      * tensor types are F32 and general.file_type is 0 (Ollama itself writes
        F16/BF16 for matrices before quantizing; F32 keeps the reference
        logits exact).
"""
import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# ---------------------------------------------------------------------------
# the converter worker (runs in a subprocess, imports nothing heavy up front)


def _convert_worker(argv):
    llama_cpp, model_dir, outfile, outtype, pre, raw_config = argv
    sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    sys.path.insert(0, str(llama_cpp))
    import convert_hf_to_gguf  # noqa: E402  (the tree's own converter)
    from conversion import base  # noqa: E402

    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            # a freshly trained tiny tokenizer has no registered hash
            return pre

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre

    if raw_config == "raw-config":
        # Take config.json as written, as the converter itself does when
        # AutoConfig cannot parse it (the case for Nemotron-H before
        # transformers had the class): AutoConfig(...).to_dict() in 5.x
        # re-adds NemotronHConfig's MoE defaults and the list-valued
        # layers_block_type, which turn a dense model into nemotron_h_moe.
        def load_hparams(dir_model, is_mistral_format):
            with open(Path(dir_model) / "config.json", encoding="utf-8") as f:
                return json.load(f)
        base.ModelBase.load_hparams = staticmethod(load_hparams)
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", outtype]
    convert_hf_to_gguf.main()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "__convert__":
    _convert_worker(sys.argv[2:])
    sys.exit(0)

# ---------------------------------------------------------------------------

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

torch.set_num_threads(1)

SEED = 20260801
VOCAB = 512
TEMPLATES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "chat-templates"

# Lengths of the three reference sequences.  100 > one 64-token delta-net
# chunk, = 6 full + 1 partial 16-token SSD chunks, > the 16-token window.
SEQ_LENS = {"main": 100, "b37": 37, "b53": 53}

# Pre-tokenizer regexes, as in the real tokenizer.json files.
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")  # Qwen2 / Qwen2.5 / Qwen3
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN_TEXT = """\
Joule runs small societies of language-model agents. Each agent has an energy budget, measured in
joules, and every action it takes costs energy: thinking, speaking, donating, or simply waiting for
the next round. The agents talk to each other in plain English and answer in JSON when the rules ask
for a decision. A society survives when its members share; it collapses when they hoard.

The first agent said: "I will donate three units to the agent with the lowest balance."
The second agent replied: "That is generous, but I need two units myself before the winter round."
The third agent thought for a while, then wrote a short plan and sent it to everyone.

{"action": "donate", "to": "agent_2", "amount": 3, "reason": "lowest balance"}
{"action": "wait", "amount": 0, "reason": "saving energy for the next round"}
{"action": "speak", "to": "all", "message": "Let us agree on a fair rule before we vote."}
{"round": 12, "balances": {"agent_1": 41.5, "agent_2": 7.25, "agent_3": 19.0}, "alive": true}
{"tool": "get_balance", "arguments": {"agent": "agent_3"}}
{"result": {"agent": "agent_3", "balance": 19.0, "unit": "J"}}

Energy is conserved within the society: what one agent gives, another receives, minus a small tax
that pays for the shared infrastructure. The tax rate is announced at the start of every round.
When the total energy falls below the threshold, the round ends early and the scores are recorded.
Agents that run out of energy stop thinking and stop speaking; their last words are kept in the log.

Questions the agents were asked: What is the fairest way to split 100 joules between 5 agents?
Should an agent that wasted energy last round receive help this round? Is it rational to cooperate
when nobody is watching? How many rounds can the society last if nobody donates anything at all?
The answers were short, sometimes wrong, and often surprisingly kind.

def split(total, n):
    share = total / n
    return [share for _ in range(n)]

for round_number in range(1, 11):
    print(f"round {round_number}: {split(100, 5)}")

The weather was cold, the river was high, and the village kept its lights on by sharing batteries.
People who had more gave to people who had less, and in the spring everyone planted seeds together.
"""


# ---------------------------------------------------------------------------
# tokenizers


def _added(content, tid, special):
    return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def bytelevel_tokenizer(split_regex, front, back):
    """Byte-level BPE: `front` specials get the first ids, `back` the last.

    front/back are lists of (content, special).  Returns the tokenizer.json
    dict; the total vocabulary is VOCAB entries."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(front) - len(back), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator([TRAIN_TEXT], trainer=trainer)
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert len(trained) == VOCAB - len(front) - len(back), len(trained)
    vocab, added = {}, []
    for content, special in front:
        added.append(_added(content, len(vocab), special))
        vocab[content] = len(vocab)
    for piece, _ in trained:
        vocab[piece] = len(vocab)
    for content, special in back:
        added.append(_added(content, len(vocab), special))
        vocab[content] = len(vocab)
    j["model"]["vocab"] = vocab
    j["added_tokens"] = added
    j["post_processor"] = None
    return j


def gemma4_tokenizer(specials):
    """SPM-style BPE as Gemma 4's: spaces become "▁", no word splitting
    other than newline runs, <0xXX> byte fallback.  Ids: specials, then the
    256 byte tokens, then the trained pieces."""
    n_pieces = VOCAB - len(specials) - 256
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    # train on "▁word" pieces, as SentencePiece does (merges never end in "▁"),
    # then tokenize whole newline-free runs, as Gemma 4 (and llama.cpp) do
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True),
    ])
    trainer = trainers.BpeTrainer(vocab_size=n_pieces, min_frequency=2, special_tokens=[], show_progress=False,
                                  limit_alphabet=80)
    tok.train_from_iterator([TRAIN_TEXT], trainer=trainer)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|\n+"), behavior="isolated")
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert len(trained) == n_pieces, len(trained)
    vocab, added = {}, []
    for content, special in specials:
        added.append(_added(content, len(vocab), special))
        vocab[content] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained:
        assert piece not in vocab, piece
        vocab[piece] = len(vocab)
    assert len(vocab) == VOCAB
    j["model"]["vocab"] = vocab
    j["model"]["byte_fallback"] = True
    j["model"]["unk_token"] = "<unk>"
    j["added_tokens"] = added
    j["post_processor"] = None
    return j


def write_tokenizer(d, tok_json, config):
    (d / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False, indent=1), encoding="utf-8")
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "clean_up_tokenization_spaces": False}
    cfg.update(config)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1), encoding="utf-8")


def template(name):
    return (TEMPLATES / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# weights


BRANCH_GAIN = 0.5  # std multiplier for the projections that write into the residual stream


def randomize(model, arch, gen):
    """Seeded weights at scales that keep logits informative."""
    def randn(shape, std):
        return torch.randn(shape, generator=gen) * std

    def unif(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=gen)

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = p.shape
            leaf = name.rsplit(".", 1)[-1]
            module = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            is_norm = p.ndim == 1 and leaf == "weight" and "norm" in module
            if arch == "qwen35" and name.endswith("linear_attn.norm.weight"):
                p.copy_(unif(shape, 0.8, 1.2))              # plain weight (not 1 + w)
            elif arch == "qwen35" and is_norm:
                p.copy_(unif(shape, -0.2, 0.2))             # Qwen3_5RMSNorm: x * (1 + w)
            elif arch == "gemma4" and module in ("q_norm", "k_norm"):
                p.copy_(unif(shape, 0.3, 0.5))              # attention scale is 1.0: keep q.k moderate
            elif arch == "gemma4" and module in ("post_attention_layernorm", "post_feedforward_layernorm",
                                                 "post_per_layer_input_norm"):
                p.copy_(unif(shape, 0.8, 1.2) * BRANCH_GAIN)  # sandwich norms set the branch gain
            elif is_norm:
                p.copy_(unif(shape, 0.8, 1.2))              # gemma4 / nemotron_h: x * w
            elif leaf == "A_log":
                if arch == "qwen35":                        # decay g = -exp(A_log) softplus(a + dt_bias)
                    p.copy_(unif(shape, np.log(0.02), np.log(4.0)))
                else:                                       # Mamba-2: A = -exp(A_log)
                    p.copy_(torch.log(unif(shape, 1.0, 8.0)))
            elif leaf == "dt_bias":
                if arch == "qwen35":
                    p.copy_(unif(shape, -1.0, 1.0))
                else:                                       # inverse softplus of dt in [0.01, 0.2]
                    dt = torch.exp(unif(shape, np.log(0.01), np.log(0.2)))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif leaf == "D":
                p.copy_(unif(shape, 0.5, 1.5))
            elif "conv1d" in name:
                p.copy_(randn(shape, 0.4 if leaf == "weight" else 0.1))
            elif name.startswith("lm_head"):
                p.copy_(randn(shape, 0.2))                  # logits std ~1.6
            elif arch == "gemma4" and name == "model.embed_tokens.weight":
                p.copy_(randn(shape, 0.35))                 # tied: input (x sqrt(64)) and output
            elif "embed_tokens" in name or name.endswith("embeddings.weight"):
                p.copy_(randn(shape, 1.0))
            elif p.ndim == 2 and module in ("o_proj", "out_proj", "down_proj", "per_layer_projection"):
                p.copy_(randn(shape, BRANCH_GAIN / np.sqrt(shape[1])))  # residual-branch outputs
            elif p.ndim == 2:
                p.copy_(randn(shape, 1.0 / np.sqrt(shape[1])))
            elif p.ndim == 1:
                p.copy_(randn(shape, 0.1))
            else:
                raise ValueError(f"unhandled parameter {name} {tuple(shape)}")
        if arch == "nemotron_h":
            # keep softplus(dt) clear of the chunked scan's clamp at time_step_min
            for layer in model.model.layers:
                if hasattr(layer.mixer, "dt_bias"):
                    layer.mixer.in_proj.weight[-layer.mixer.num_heads:] *= 0.5
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):              # gemma4 per-layer output scale
                b.copy_(unif(b.shape, 0.6, 1.2))


def random_state(shapes, gen, norm_plus_one_style):
    """Random tensors for checkpoint entries that transformers does not model (MTP, vision)."""
    out = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight") or "norm_" in name.rsplit(".", 1)[0].rsplit(".", 1)[-1]:
            base = 0.0 if norm_plus_one_style else 1.0
            out[name] = base + 0.2 * (torch.rand(shape, generator=gen) - 0.5)
        elif len(shape) >= 2:
            out[name] = torch.randn(shape, generator=gen) / np.sqrt(shape[-1])
        else:
            out[name] = 0.1 * torch.randn(shape, generator=gen)
    return out


# ---------------------------------------------------------------------------
# the four models


def qwen35_spec():
    # interleaved MRoPE sections [11, 11, 10] of 32 rotary pairs, scaled to 4 pairs
    # (head_dim 32 * partial_rotary_factor 0.25 = 8 rotary dims)
    rope = {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False, rope_parameters=rope,
        full_attention_interval=4,
        linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4,
        bos_token_id=None, eos_token_id=VOCAB - 11, pad_token_id=VOCAB - 13,
    )
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    return cfg


QWEN35_BACK = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
               ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|image_pad|>", True),
               ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
               ("<think>", False), ("</think>", False), ("<tool_response>", False),
               ("</tool_response>", False)]

NEMOTRON_FRONT = [("<unk>", True), ("<s>", True), ("</s>", True), ("<|im_start|>", True),
                  ("<|im_end|>", True), ("<think>", True), ("</think>", True), ("<tool_call>", True),
                  ("</tool_call>", True), ("<tool_response>", True), ("</tool_response>", True)]

GEMMA4_SPECIALS = [("<pad>", True), ("<eos>", True), ("<bos>", True), ("<unk>", True), ("<mask>", True),
                   ("<|turn>", True), ("<turn|>", True), ("<|think|>", True), ("<|channel>", True),
                   ("<channel|>", True), ("<|tool>", True), ("<tool|>", True), ("<|tool_call>", True),
                   ("<tool_call|>", True), ("<|tool_response>", True), ("<tool_response|>", True),
                   ('<|"|>', True), ("<|image|>", True), ("<|audio|>", True), ("<|video|>", True),
                   ("<|image>", True), ("<|audio>", True), ("<image|>", True), ("<audio|>", True)]

# Qwen3's added tokens in the real order (ids 151643-151668 there, the last 26 ids here)
QWEN3_BACK = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
              ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
              ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
              ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
              ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
              ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
              ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
              ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
              ("<think>", False), ("</think>", False)]

NEMOTRON_PATTERN = "M-M*-MM*-M-"


def nemotron_spec():
    cfg = transformers.NemotronHConfig(
        vocab_size=VOCAB, hidden_size=64, hybrid_override_pattern=NEMOTRON_PATTERN,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=128,
        mlp_hidden_act="relu2", mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
        conv_kernel=4, expand=2, chunk_size=16, use_conv_bias=True, mamba_proj_bias=False, use_bias=False,
        layer_norm_epsilon=1e-5, max_position_embeddings=4096, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=4, pad_token_id=0, rescale_prenorm_residual=False,
    )
    cfg.architectures = ["NemotronHForCausalLM"]
    return cfg


GEMMA4_LAYERS = 18
GEMMA4_SHARED = 8
GEMMA4_GLOBAL_HEAD_DIM = 64


def gemma4_spec():
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1_000_000.0}}
    cfg = transformers.Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=GEMMA4_LAYERS,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=GEMMA4_GLOBAL_HEAD_DIM,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=4096, rms_norm_eps=1e-6,
        sliding_window=16, final_logit_softcapping=30.0, rope_parameters=rope,
        vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=32,
        num_kv_shared_layers=GEMMA4_SHARED, attention_k_eq_v=False, enable_moe_block=False,
        use_double_wide_mlp=False, tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    cfg.architectures = ["Gemma4ForCausalLM"]
    return cfg


def qwen3_spec():
    n_back = len(QWEN3_BACK)
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        attention_bias=False, use_sliding_window=False, hidden_act="silu",
        bos_token_id=VOCAB - n_back, eos_token_id=VOCAB - n_back + 2, pad_token_id=None,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    return cfg


def qwen35_mtp_shapes(cfg):
    """The MTP block of a Qwen3.5 checkpoint (one full-attention layer + fusion)."""
    h, hd, nh, nkv, ff = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    p = "mtp.layers.0."
    return {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
        p + "input_layernorm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (2 * nh * hd, h),
        p + "self_attn.k_proj.weight": (nkv * hd, h),
        p + "self_attn.v_proj.weight": (nkv * hd, h),
        p + "self_attn.o_proj.weight": (h, nh * hd),
        p + "self_attn.q_norm.weight": (hd,),
        p + "self_attn.k_norm.weight": (hd,),
        p + "mlp.gate_proj.weight": (ff, h),
        p + "mlp.up_proj.weight": (ff, h),
        p + "mlp.down_proj.weight": (h, ff),
    }


ARCHS = {
    "qwen35": {
        "spec": qwen35_spec, "cls": "Qwen3_5ForCausalLM", "pre": "qwen35", "template": "Qwen3.5-4B.jinja",
    },
    "nemotron_h": {
        "spec": nemotron_spec, "cls": "NemotronHForCausalLM", "pre": "pixtral",
        "template": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    },
    "gemma4": {
        "spec": gemma4_spec, "cls": "Gemma4ForCausalLM", "pre": "gemma4", "template": "google-gemma-4-31B-it.jinja",
    },
    "qwen3": {
        # the Qwen3 chat template (the same for the whole Qwen3 family, Qwen3-8B included)
        "spec": qwen3_spec, "cls": "Qwen3ForCausalLM", "pre": "qwen2", "template": "Qwen-Qwen3-0.6B.jinja",
    },
}


def make_tokenizer(arch, d):
    if arch == "qwen35":
        j = bytelevel_tokenizer(QWEN35_SPLIT, [], QWEN35_BACK)
        write_tokenizer(d, j, {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                               "unk_token": None, "add_bos_token": False, "add_prefix_space": False,
                               "chat_template": template(ARCHS[arch]["template"])})
        ids = {t["content"]: t["id"] for t in j["added_tokens"]}
        gen_cfg = {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"]}
    elif arch == "nemotron_h":
        j = bytelevel_tokenizer(LLAMA3_SPLIT, NEMOTRON_FRONT, [])
        write_tokenizer(d, j, {"bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>",
                               "pad_token": "<unk>", "chat_template": template(ARCHS[arch]["template"])})
        gen_cfg = {"bos_token_id": 1, "eos_token_id": [2, 4], "pad_token_id": 0}
    elif arch == "qwen3":
        j = bytelevel_tokenizer(QWEN2_SPLIT, [], QWEN3_BACK)
        write_tokenizer(d, j, {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                               "unk_token": None, "add_bos_token": False, "add_prefix_space": False,
                               "errors": "replace", "split_special_tokens": False,
                               "chat_template": template(ARCHS[arch]["template"])})
        ids = {t["content"]: t["id"] for t in j["added_tokens"]}
        gen_cfg = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                   "pad_token_id": ids["<|endoftext|>"]}
    else:
        j = gemma4_tokenizer(GEMMA4_SPECIALS)
        extra = [c for c, _ in GEMMA4_SPECIALS[5:]]
        write_tokenizer(d, j, {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                               "mask_token": "<mask>", "extra_special_tokens": extra, "add_bos_token": True,
                               "add_eos_token": False, "chat_template": template(ARCHS[arch]["template"])})
        gen_cfg = {"bos_token_id": 2, "eos_token_id": [1, 6], "pad_token_id": 0}
    (d / "generation_config.json").write_text(json.dumps(gen_cfg, indent=1))
    return j


def special_ids(tok_json):
    return sorted(t["id"] for t in tok_json["added_tokens"])


def token_sequences(arch, tok_json):
    """Seeded ids over the ordinary (non-added, non-byte-fallback) tokens."""
    specials = set(special_ids(tok_json))
    vocab = tok_json["model"]["vocab"]
    byte_tokens = {i for s, i in vocab.items() if s.startswith("<0x") and len(s) == 6}
    pool = np.array([i for i in range(VOCAB) if i not in specials and i not in byte_tokens])
    seed = int(hashlib.sha256(arch.encode()).hexdigest()[:8], 16) ^ SEED
    rng = np.random.Generator(np.random.PCG64(seed))
    return {k: [int(x) for x in rng.choice(pool, size=n, replace=True)] for k, n in SEQ_LENS.items()}


TOKENIZER_CHECKS = [
    "Hello world, the agents share energy.",
    '{"action": "donate", "to": "agent_2", "amount": 3}',
    "round 12: 41.5 J\n\nWhy?  Because\tthey can't.",
    "caf\u00e9 \u00fcber na\u00efve \u65e5\u672c",
]


# ---------------------------------------------------------------------------
# conversion and listings


def convert(llama_cpp, model_dir, outfile, outtype, pre, raw_config):
    cmd = [sys.executable, str(Path(__file__).resolve()), "__convert__", str(llama_cpp), str(model_dir),
           str(outfile), outtype, pre, "raw-config" if raw_config else "auto-config"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-8000:])
        raise SystemExit(f"conversion failed: {outfile}")
    return res.stderr


def _fmt_value(key, v):
    if isinstance(v, list):
        if key.startswith("tokenizer.ggml.") and len(v) > 16:
            return f"[{len(v)} entries] " + json.dumps(v[:12], ensure_ascii=False)[:-1] + ", ...]"
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, str):
        if len(v) > 120:
            return json.dumps(v[:100], ensure_ascii=False)[:-1] + f"...\" ({len(v)} chars, sha256 {hashlib.sha256(v.encode()).hexdigest()[:16]})"
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, float):
        return repr(float(np.float32(v)))
    return repr(v)


def listing(gguf_mod, path):
    r = gguf_mod.GGUFReader(str(path))
    lines = [f"# {path.name}: GGUF v{r.fields['GGUF.version'].contents()}, {len(r.tensors)} tensors, "
             f"{os.path.getsize(path)} bytes", "", "## metadata (key: type = value)"]
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        meta[k] = v
        t = f.types[0].name
        if t == "ARRAY":
            t = f"ARRAY[{f.types[1].name if len(f.types) > 1 else '?'}]"
        lines.append(f"{k}: {t} = {_fmt_value(k, v)}")
    lines += ["", "## tensors (name  type  ggml shape ne[0..]  elements  [f32: min max mean])"]
    for t in r.tensors:
        ne = [int(x) for x in t.shape]
        row = f"{t.name:40s} {t.tensor_type.name:5s} {str(ne):16s} {t.n_elements:8d}"
        if t.tensor_type.name == "F32":
            a = np.asarray(t.data, dtype=np.float32)
            row += f"  {a.min(): .4f} {a.max(): .4f} {a.mean(): .4f}"
        lines.append(row)
    path.with_name(path.name + ".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return r, meta


# ---------------------------------------------------------------------------
# what the converter did, checked value by value (documents the layout)

NEMOTRON_MAP = [  # HF name pattern -> GGUF name
    (r"(?:backbone|model)\.embeddings\.weight", "token_embd.weight"),
    (r"(?:backbone|model)\.norm_f\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.norm\.weight", r"blk.\1.attn_norm.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.in_proj\.weight", r"blk.\1.ssm_in.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.conv1d\.weight", r"blk.\1.ssm_conv1d.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.conv1d\.bias", r"blk.\1.ssm_conv1d.bias"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.dt_bias", r"blk.\1.ssm_dt.bias"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.A_log", r"blk.\1.ssm_a"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.D", r"blk.\1.ssm_d"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.norm\.weight", r"blk.\1.ssm_norm.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.out_proj\.weight", r"blk.\1.ssm_out.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.q_proj\.weight", r"blk.\1.attn_q.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.k_proj\.weight", r"blk.\1.attn_k.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.v_proj\.weight", r"blk.\1.attn_v.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.o_proj\.weight", r"blk.\1.attn_output.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.up_proj\.weight", r"blk.\1.ffn_up.weight"),
    (r"(?:backbone|model)\.layers\.(\d+)\.mixer\.down_proj\.weight", r"blk.\1.ffn_down.weight"),
]

GEMMA4_MAP = [
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.embed_tokens_per_layer\.weight", "per_layer_token_embd.weight"),
    (r"model\.per_layer_model_projection\.weight", "per_layer_model_proj.weight"),
    (r"model\.per_layer_projection_norm\.weight", "per_layer_proj_norm.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
] + [(rf"model\.layers\.(\d+)\.{hf}", rf"blk.\1.{gg}") for hf, gg in [
    (r"input_layernorm\.weight", "attn_norm.weight"),
    (r"post_attention_layernorm\.weight", "post_attention_norm.weight"),
    (r"pre_feedforward_layernorm\.weight", "ffn_norm.weight"),
    (r"post_feedforward_layernorm\.weight", "post_ffw_norm.weight"),
    (r"post_per_layer_input_norm\.weight", "post_norm.weight"),
    (r"per_layer_input_gate\.weight", "inp_gate.weight"),
    (r"per_layer_projection\.weight", "proj.weight"),
    (r"layer_scalar", "layer_output_scale.weight"),
    (r"self_attn\.q_proj\.weight", "attn_q.weight"),
    (r"self_attn\.k_proj\.weight", "attn_k.weight"),
    (r"self_attn\.v_proj\.weight", "attn_v.weight"),
    (r"self_attn\.o_proj\.weight", "attn_output.weight"),
    (r"self_attn\.q_norm\.weight", "attn_q_norm.weight"),
    (r"self_attn\.k_norm\.weight", "attn_k_norm.weight"),
    (r"mlp\.gate_proj\.weight", "ffn_gate.weight"),
    (r"mlp\.up_proj\.weight", "ffn_up.weight"),
    (r"mlp\.down_proj\.weight", "ffn_down.weight"),
]]


QWEN3_MAP = [
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
] + [(rf"model\.layers\.(\d+)\.{hf}", rf"blk.\1.{gg}") for hf, gg in [
    (r"input_layernorm\.weight", "attn_norm.weight"),
    (r"post_attention_layernorm\.weight", "ffn_norm.weight"),
    (r"self_attn\.q_proj\.weight", "attn_q.weight"),
    (r"self_attn\.k_proj\.weight", "attn_k.weight"),
    (r"self_attn\.v_proj\.weight", "attn_v.weight"),
    (r"self_attn\.o_proj\.weight", "attn_output.weight"),
    (r"self_attn\.q_norm\.weight", "attn_q_norm.weight"),
    (r"self_attn\.k_norm\.weight", "attn_k_norm.weight"),
    (r"mlp\.gate_proj\.weight", "ffn_gate.weight"),
    (r"mlp\.up_proj\.weight", "ffn_up.weight"),
    (r"mlp\.down_proj\.weight", "ffn_down.weight"),
]]


QWEN35_MTP_MAP = [  # llama.cpp: the MTP block becomes layer n_layer ("blk.8" here)
    (r"mtp\.fc\.weight", "nextn.eh_proj.weight"),
    (r"mtp\.pre_fc_norm_embedding\.weight", "nextn.enorm.weight"),
    (r"mtp\.pre_fc_norm_hidden\.weight", "nextn.hnorm.weight"),
    (r"mtp\.norm\.weight", "nextn.shared_head_norm.weight"),
    (r"mtp\.layers\.0\.(.*)", r"\1"),
]


def to_gguf(arch, hf_name, x, cfg):
    """(llama.cpp GGUF name, tensor in PyTorch order) for one checkpoint tensor:
    the converter's renaming and value transforms, re-implemented here so that
    verify_layout can check them value by value."""
    import re
    x = x.float()
    if arch == "qwen35":
        if hf_name.startswith("mtp."):
            for pat, rep in QWEN35_MTP_MAP:
                if re.fullmatch(pat, hf_name):
                    inner = re.sub(pat, rep, hf_name)
                    break
            if not inner.startswith("nextn."):
                inner = go_replace("model.layers.0." + inner).split(".", 2)[2]
            name = f"blk.{cfg.num_hidden_layers}.{inner}"
            return name, (x + 1 if name.endswith("norm.weight") else x)
        (name, t), = ollama_tensors({hf_name: x}, cfg).items()  # same values as llama.cpp's
        return (name + ".bias" if name.endswith(".ssm_dt") else name), t
    table = {"nemotron_h": NEMOTRON_MAP, "gemma4": GEMMA4_MAP, "qwen3": QWEN3_MAP}[arch]
    for pat, rep in table:
        if re.fullmatch(pat, hf_name):
            name = re.sub(pat, rep, hf_name)
            break
    else:
        raise AssertionError(f"{arch}: no GGUF name for {hf_name}")
    if arch == "nemotron_h":
        if name.endswith(".ssm_a"):
            x = (-torch.exp(x)).reshape(-1, 1)           # ne [1, n_head]
        elif name.endswith(".ssm_d"):
            x = x.reshape(-1, 1)                          # ne [1, n_head]
        elif name.endswith(".ssm_conv1d.weight"):
            x = x.squeeze(1)                              # ne [kernel, channels]
        elif name.endswith(".ssm_norm.weight"):
            x = x.reshape(cfg.n_groups, -1)               # ne [d_inner / n_group, n_group]
        elif name.endswith((".attn_q.weight", ".attn_k.weight")):
            # LlamaModel's RoPE row permutation (undo_permute), applied although
            # Nemotron-H has no RoPE: within every head, rows [0..d/2) and
            # [d/2..d) are interleaved.  q and k get the same per-head
            # permutation, so q.k (and the attention output) is unchanged.
            n = cfg.num_attention_heads if name.endswith(".attn_q.weight") else cfg.num_key_value_heads
            x = x.reshape(n, 2, x.shape[0] // n // 2, x.shape[1]).swapaxes(1, 2).reshape(x.shape)
    return name, x.contiguous()


def verify_layout(arch, state, cfg, reader):
    """Every tensor of the f32 GGUF equals the checkpoint tensor under to_gguf."""
    gg = {t.name: np.asarray(t.data) for t in reader.tensors}
    seen = set()
    for hf_name, t in state.items():
        name, x = to_gguf(arch, hf_name, t, cfg)
        a, b = x.numpy(), gg[name]
        assert a.shape == b.shape and np.array_equal(a, b), f"{arch}: {hf_name} -> {name} differs"
        seen.add(name)
    rest = set(gg) - seen
    assert rest <= {"rope_freqs.weight"}, rest
    if arch == "gemma4":
        hd = GEMMA4_GLOBAL_HEAD_DIM
        n_rot = int(hd * cfg.rope_parameters["full_attention"]["partial_rotary_factor"] / 2)
        want = np.array([1.0] * n_rot + [1e30] * (hd // 2 - n_rot), dtype=np.float32)
        assert np.array_equal(gg["rope_freqs.weight"], want)
    return len(seen)


def q8_0_weights(gguf_mod, arch, model, cfg, q8_reader):
    """A copy of `model` whose weights are what the q8_0 GGUF holds, dequantized
    (Q8_0 tensors round-tripped, the rest exact).  The converter's transforms of
    quantized tensors are pure row/column permutations, so each GGUF tensor is
    mapped back through the permutation found by transforming an index matrix."""
    qt = {t.name: t for t in q8_reader.tensors}
    m = copy.deepcopy(model)
    n_q = 0
    with torch.no_grad():
        for name, p in m.named_parameters():
            gname, _ = to_gguf(arch, name, p.detach(), cfg)
            t = qt[gname]
            if t.tensor_type != gguf_mod.GGMLQuantizationType.Q8_0:
                continue
            deq = gguf_mod.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            idx = torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape)
            _, perm = to_gguf(arch, name, idx, cfg)
            perm = perm.numpy().reshape(-1).astype(np.int64)
            assert np.array_equal(np.sort(perm), np.arange(p.numel())), gname
            flat = np.empty(p.numel(), dtype=np.float32)
            flat[perm] = deq.reshape(-1)
            p.copy_(torch.from_numpy(flat.reshape(tuple(p.shape))))
            n_q += 1
    return m, n_q


# ---------------------------------------------------------------------------
# reference logits


@torch.no_grad()
def logits_for(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=0)
    return out.logits[0].numpy()


def logit_stats(x):
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ent = -(p * np.log(p + 1e-30)).sum(-1)
    return {"std": float(x.std(-1).mean()), "max_abs": float(np.abs(x).max()),
            "top1_prob_mean": float(p.max(-1).mean()), "entropy_mean_nats": float(ent.mean()),
            "entropy_uniform_nats": float(np.log(x.shape[-1]))}


# ---------------------------------------------------------------------------
# Ollama layout for qwen35 (see module docstring)

OLLAMA_RENAMES = [  # strings.Replacer pairs of Ollama's qwen3NextModel.Replacements(), da70c322
    ("lm_head", "output"), ("model.language_model.embed_tokens", "token_embd"),
    ("model.language_model.norm", "output_norm"), ("model.language_model.layers", "blk"),
    ("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("model.layers", "blk"),
    ("model.visual", "v"), ("patch_embed.proj", "patch_embed"), ("blocks", "blk"), ("attn.qkv", "attn_qkv"),
    ("attn.proj", "attn_out"), ("deepstack_merger_list", "deepstack_merger"),
    ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "post_attention_norm"),
    ("self_attn.q_proj", "attn_q"), ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_proj", "attn_k"),
    ("self_attn.k_norm", "attn_k_norm"), ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
    ("linear_attn.in_proj_qkvz", "ssm_in"), ("linear_attn.in_proj_ba", "ssm_ba"),
    ("linear_attn.in_proj_qkv", "attn_qkv"), ("linear_attn.in_proj_z", "attn_gate"),
    ("linear_attn.in_proj_a", "ssm_alpha"), ("linear_attn.in_proj_b", "ssm_beta"),
    ("linear_attn.conv1d", "ssm_conv1d"), ("linear_attn.dt_bias", "ssm_dt"), ("linear_attn.dt_proj", "ssm_dt"),
    ("linear_attn.A_log", "ssm_a"), ("linear_attn.norm", "ssm_norm"), ("linear_attn.out_proj", "ssm_out"),
    ("mlp.gate.weight", "ffn_gate_inp.weight"), ("mlp.shared_expert.down_proj", "ffn_down_shexp"),
    ("mlp.shared_expert.gate_proj", "ffn_gate_shexp"), ("mlp.shared_expert.up_proj", "ffn_up_shexp"),
    ("mlp.shared_expert_gate", "ffn_gate_inp_shexp"),
    ("mlp.down_proj", "ffn_down"), ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
]


def go_replace(name):
    """Go's strings.NewReplacer: scan left to right; at each position the first
    listed pair whose old string matches is applied (generic algorithm: the
    earliest-listed match at the leftmost position)."""
    out, i = [], 0
    while i < len(name):
        for old, new in OLLAMA_RENAMES:
            if name.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def reorder_v_heads(x, dim, n_k, n_v_per_k, head_dim):
    """Grouped (by key head) -> tiled value-head order along `dim` (as both converters do)."""
    shape = list(x.shape)
    x = x.reshape(shape[:dim] + [n_k, n_v_per_k, head_dim] + shape[dim + 1:])
    x = x.transpose(dim, dim + 1).contiguous()
    return x.reshape(shape)


def ollama_tensors(hf, cfg):
    """Ollama (da70c322) qwen3NextModel.Tensors for a Qwen3.5 dense checkpoint; PyTorch shapes."""
    n_k, n_v = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    hk, hv, r = cfg.linear_key_head_dim, cfg.linear_value_head_dim, n_v // n_k
    out = {}
    for src, t in hf.items():
        name = go_replace(src)
        t = t.float().clone()
        if name.startswith("v.blk.") and ".attn_qkv" in name:
            for part, chunk in zip(("attn_q", "attn_k", "attn_v"), torch.chunk(t, 3, dim=0)):
                out[name.replace("attn_qkv", part)] = chunk.contiguous()
            continue
        if "patch_embed" in name and name.endswith("weight"):
            out[name] = t.reshape((t.shape[0] * t.shape[1],) + tuple(t.shape[2:]))
            continue
        if name.endswith("_norm.weight") and not name.endswith(".ssm_norm.weight"):
            t = t + 1
        elif name.endswith(".ssm_a"):
            t = reorder_v_heads(-torch.exp(t), 0, n_k, r, 1)
        elif name.endswith(".attn_qkv.weight"):
            qk = 2 * n_k * hk
            t = torch.cat([t[:qk], reorder_v_heads(t[qk:], 0, n_k, r, hv)], 0)
        elif name.endswith(".attn_gate.weight"):
            t = reorder_v_heads(t, 0, n_k, r, hv)
        elif name.endswith(".ssm_beta.weight") or name.endswith(".ssm_alpha.weight"):
            t = reorder_v_heads(t, 0, n_k, r, 1)
        elif name.endswith(".ssm_dt"):
            t = reorder_v_heads(t, 0, n_k, r, 1)
        elif name.endswith(".ssm_out.weight"):
            t = reorder_v_heads(t, 1, n_k, r, hv)
        elif name.endswith(".ssm_conv1d.weight"):
            t = t.squeeze(1)
            qk = 2 * n_k * hk
            t = torch.cat([t[:qk], reorder_v_heads(t[qk:], 0, n_k, r, hv)], 0)
        out[name] = t.contiguous()
    return out


def tiny_vision_state(gen, out_hidden):
    vcfg = transformers.models.qwen3_5.configuration_qwen3_5.Qwen3_5VisionConfig(
        depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=out_hidden, num_position_embeddings=16)
    vm = transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5VisionModel(vcfg)
    shapes = {f"model.visual.{k}": tuple(v.shape) for k, v in vm.state_dict().items()}
    return vcfg, random_state(shapes, gen, norm_plus_one_style=False)


def write_gguf_raw(path, kvs, tensors, alignment=32):
    """A plain GGUF v3 writer, used for the Ollama-layout file: keys and tensors
    in exactly the given order, F32 data, and empty arrays allowed (Ollama
    writes an empty vision.deepstack_visual_indexes, which gguf-py's writer
    refuses)."""
    import struct
    T = {"UINT8": 0, "INT8": 1, "UINT16": 2, "INT16": 3, "UINT32": 4, "INT32": 5, "FLOAT32": 6, "BOOL": 7,
         "STRING": 8, "ARRAY": 9, "UINT64": 10, "INT64": 11, "FLOAT64": 12}
    FMT = {4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q"}

    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def scalar(t, v):
        return s(v) if t == T["STRING"] else struct.pack(FMT[t], v)

    buf = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, value, vtype, sub in kvs:
        t = T[vtype.name]
        buf += s(key) + struct.pack("<I", t)
        if t == T["ARRAY"]:
            st = T[sub.name]
            buf += struct.pack("<IQ", st, len(value))
            for v in value:
                buf += scalar(st, v)
        else:
            buf += scalar(t, value)
    offset = 0
    for name, arr in tensors:
        ne = list(reversed(arr.shape))
        buf += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        buf += struct.pack("<IQ", 0, offset)  # type 0 = F32
        offset += arr.nbytes
        offset += (alignment - offset % alignment) % alignment
    buf += b"\0" * ((alignment - len(buf) % alignment) % alignment)
    for name, arr in tensors:
        buf += np.ascontiguousarray(arr, dtype="<f4").tobytes()
        buf += b"\0" * ((alignment - len(buf) % alignment) % alignment)
    Path(path).write_bytes(bytes(buf))


def write_ollama_qwen35(gguf_mod, out_path, hf_text, mtp, vision, vcfg, cfg, tok_dir, llama_reader):
    # checkpoint names as in Qwen3_5ForConditionalGeneration
    ckpt = {}
    for k, v in hf_text.items():
        ckpt[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    ckpt.update(mtp)
    ckpt.update(vision)
    tensors = ollama_tensors(ckpt, cfg)

    # cross-check: every text tensor equals the llama.cpp file's (names mapped)
    lc = {t.name: np.asarray(t.data) for t in llama_reader.tensors}
    n_checked = 0
    for name, t in tensors.items():
        if name.startswith(("v.", "mtp.")):
            continue
        lc_name = name + ".bias" if name.endswith(".ssm_dt") else name
        a = t.numpy().astype(np.float32)
        b = lc[lc_name]
        assert tuple(reversed(b.shape)) == tuple(reversed(a.shape)) or b.size == a.size, (name, a.shape, b.shape)
        assert np.array_equal(a.reshape(-1), b.reshape(-1)), f"ollama/llama.cpp mismatch in {name}"
        n_checked += 1
    assert n_checked == sum(1 for n in lc if not n.startswith("blk.8.")), "text tensor sets differ"

    tok = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tcfg = json.loads((tok_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    gcfg = json.loads((tok_dir / "generation_config.json").read_text())
    by_id = {i: s for s, i in tok["model"]["vocab"].items()}
    added = {t["content"]: t for t in tok["added_tokens"]}
    for t in tok["added_tokens"]:
        by_id[t["id"]] = t["content"]
    tokens, scores, types = [], [], []
    for i in sorted(by_id):
        s = by_id[i]
        tokens.append(s)
        scores.append(float(i))
        types.append(3 if s in added and added[s]["special"] else 4 if s in added else 1)
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]

    U32, I32, F32, BOOL, STR = (gguf_mod.GGUFValueType.UINT32, gguf_mod.GGUFValueType.INT32,
                                gguf_mod.GGUFValueType.FLOAT32, gguf_mod.GGUFValueType.BOOL,
                                gguf_mod.GGUFValueType.STRING)
    ARR = gguf_mod.GGUFValueType.ARRAY
    kv = {}

    def put(k, v, t, sub=None):
        kv[k] = (v, t, sub)

    A = "qwen35."
    put("general.architecture", "qwen35", STR)
    put("general.file_type", 0, U32)
    put("general.quantization_version", 2, U32)
    put("tokenizer.ggml.model", "gpt2", STR)
    put("tokenizer.ggml.pre", "qwen35", STR)
    put("tokenizer.ggml.tokens", tokens, ARR, STR)
    put("tokenizer.ggml.scores", scores, ARR, F32)
    put("tokenizer.ggml.token_type", types, ARR, I32)
    put("tokenizer.ggml.merges", merges, ARR, STR)
    put("tokenizer.chat_template", tcfg["chat_template"], STR)
    for st, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("sep", "seperator"),
                    ("pad", "padding"), ("cls", "cls"), ("mask", "mask")):
        content = tcfg.get(f"{st}_token")
        if isinstance(content, dict):
            content = content.get("content")
        if content in added:
            put(f"tokenizer.ggml.add_{key}_token", bool(tcfg.get(f"add_{st}_token", False)), BOOL)
            put(f"tokenizer.ggml.{key}_token_id", added[content]["id"], U32)
            if isinstance(gcfg.get(f"{st}_token_id"), list):
                put(f"tokenizer.ggml.{key}_token_ids", gcfg[f"{st}_token_id"], ARR, I32)
    rp = cfg.rope_parameters
    sections = list(rp["mrope_section"])
    hd = cfg.head_dim
    put(A + "block_count", cfg.num_hidden_layers, U32)
    put(A + "context_length", cfg.max_position_embeddings, U32)
    put(A + "embedding_length", cfg.hidden_size, U32)
    put(A + "feed_forward_length", cfg.intermediate_size, U32)
    put(A + "attention.head_count", cfg.num_attention_heads, U32)
    put(A + "attention.key_length", hd, U32)
    put(A + "attention.value_length", hd, U32)
    put(A + "attention.layer_norm_rms_epsilon", cfg.rms_norm_eps, F32)
    put(A + "rope.freq_base", rp["rope_theta"], F32)
    put(A + "rope.dimension_count", int(hd * rp["partial_rotary_factor"]), U32)
    put(A + "mrope_sections", sections, ARR, I32)
    put(A + "rope.mrope_section", sections, ARR, I32)
    put(A + "rope.dimension_sections", sections, ARR, I32)
    put(A + "rope.mrope_interleaved", True, BOOL)
    put(A + "ssm.inner_size", cfg.linear_value_head_dim * cfg.linear_num_value_heads, U32)
    put(A + "ssm.state_size", cfg.linear_key_head_dim, U32)
    put(A + "ssm.group_count", cfg.linear_num_key_heads, U32)
    put(A + "ssm.time_step_rank", cfg.linear_num_value_heads, U32)
    put(A + "ssm.conv_kernel", cfg.linear_conv_kernel_dim, U32)
    put(A + "ssm.v_head_reordered", True, BOOL)
    put(A + "full_attention_interval", 4, U32)
    put(A + "attention.head_count_kv",
        [cfg.num_key_value_heads if t == "full_attention" else 0 for t in cfg.layer_types], ARR, U32)
    put(A + "vision.block_count", vcfg.depth, U32)
    put(A + "vision.embedding_length", vcfg.hidden_size, U32)
    put(A + "vision.attention.head_count", vcfg.num_heads, U32)
    put(A + "vision.num_channels", vcfg.in_channels, U32)
    put(A + "vision.patch_size", vcfg.patch_size, U32)
    put(A + "vision.spatial_merge_size", vcfg.spatial_merge_size, U32)
    put(A + "vision.temporal_patch_size", vcfg.temporal_patch_size, U32)
    put(A + "vision.deepstack_visual_indexes", [], ARR, I32)
    put(A + "vision.shortest_edge", 65536, U32)          # preprocessor_config.json of Qwen3.5
    put(A + "vision.longest_edge", 16777216, U32)
    put(A + "vision.image_mean", [0.5, 0.5, 0.5], ARR, F32)
    put(A + "vision.image_std", [0.5, 0.5, 0.5], ARR, F32)
    put(A + "image_token_id", added["<|image_pad|>"]["id"], U32)
    put(A + "vision_start_token_id", added["<|vision_start|>"]["id"], U32)
    put(A + "vision_end_token_id", added["<|vision_end|>"]["id"], U32)

    def block(n):
        if n.startswith("blk."):
            return int(n.split(".")[1])
        return 1 << 62
    order = sorted(tensors, key=lambda n: (block(n), n))
    write_gguf_raw(out_path, [(k, *kv[k]) for k in sorted(kv)],
                   [(n, tensors[n].numpy().astype(np.float32)) for n in order])
    return n_checked


# ---------------------------------------------------------------------------


def build(arch, llama_cpp, outdir, gguf_mod, tmp):
    spec = ARCHS[arch]
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, arch)))
    torch.manual_seed(SEED)
    cfg = spec["spec"]()
    cls = getattr(transformers, spec["cls"])
    model = cls(cfg).float().eval()
    randomize(model, arch, gen)

    d = tmp / arch
    d.mkdir()
    model.save_pretrained(d, safe_serialization=True)
    tok_json = make_tokenizer(arch, d)

    conf = json.loads((d / "config.json").read_text())
    extra = {}
    if arch == "qwen35":
        conf["full_attention_interval"] = 4
        conf["mtp_num_hidden_layers"] = 1
        st = load_file(d / "model.safetensors")
        mtp = random_state(qwen35_mtp_shapes(cfg), gen, norm_plus_one_style=True)
        extra["mtp"] = mtp
        extra["text"] = {k: v.clone() for k, v in st.items()}
        st.update(mtp)
        save_file(st, d / "model.safetensors", metadata={"format": "pt"})
    elif arch == "nemotron_h":
        for k in ("num_experts_per_tok", "n_routed_experts", "n_shared_experts", "moe_intermediate_size",
                  "moe_shared_expert_intermediate_size", "moe_latent_size", "moe_shared_expert_overlap",
                  "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "output_router_logits",
                  "mtp_layers_block_type", "num_nextn_predict_layers"):
            conf.pop(k, None)
        conf.pop("layers_block_type", None)
        conf["hybrid_override_pattern"] = NEMOTRON_PATTERN
        conf["num_hidden_layers"] = len(NEMOTRON_PATTERN)
    (d / "config.json").write_text(json.dumps(conf, indent=1))

    # the saved checkpoint must reproduce the in-memory model
    ids = token_sequences(arch, tok_json)
    ref = {k: logits_for(model, v) for k, v in ids.items()}
    reloaded = cls.from_pretrained(d, torch_dtype=torch.float32).eval()
    again = logits_for(reloaded, ids["main"])
    assert np.array_equal(again, ref["main"]), f"{arch}: reloaded checkpoint differs"
    del reloaded

    # float64 twin: causality check (a prefix run equals the first rows of the
    # long run) and the float32 noise floor of the saved references
    model64 = copy.deepcopy(model).double()
    ref64 = {k: logits_for(model64, v) for k, v in ids.items()}
    prefix_diff = float(np.abs(logits_for(model64, ids["main"][:37]) - ref64["main"][:37]).max())
    assert prefix_diff < 1e-9, (arch, prefix_diff)
    f32_noise = {k: float(np.abs(ref[k].astype(np.float64) - ref64[k]).max()) for k in ids}
    del model64

    if arch == "nemotron_h":
        # the chunked scan clamps dt >= time_step_min; make sure that never binds
        with torch.no_grad():
            mins = []
            hs = []
            for layer in model.model.layers:
                if hasattr(layer.mixer, "dt_bias"):
                    mix = layer.mixer
                    hs.append(mix.in_proj.register_forward_hook(
                        lambda m, i, o, mix=mix: mins.append(float(torch.nn.functional.softplus(
                            o[..., -mix.num_heads:] + mix.dt_bias).min()))))
            logits_for(model, ids["main"])
            for h in hs:
                h.remove()
            extra["dt_min"] = min(mins)
            assert extra["dt_min"] > cfg.time_step_min, extra["dt_min"]

    # conversions
    files = {}
    for outtype in ("f32", "q8_0"):
        out = outdir / f"{arch}.{outtype}.gguf"
        convert(llama_cpp, d, out, outtype, spec["pre"], raw_config=(arch == "nemotron_h"))
        reader, meta = listing(gguf_mod, out)
        assert meta["general.architecture"] == arch, (out, meta["general.architecture"])
        files[outtype] = (out, reader, meta)

    state = load_file(d / "model.safetensors")             # what the converter read
    n_verified = verify_layout(arch, state, cfg, files["f32"][1])
    model_q8, n_q8 = q8_0_weights(gguf_mod, arch, model, cfg, files["q8_0"][1])
    ref_q8 = logits_for(model_q8, ids["main"])
    np.save(outdir / f"{arch}.q8_0.logits.main.npy", ref_q8.astype(np.float32))
    del model_q8

    for k, v in ref.items():
        np.save(outdir / f"{arch}.logits.{k}.npy", v.astype(np.float32))

    tok = transformers.AutoTokenizer.from_pretrained(d)
    checks = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in TOKENIZER_CHECKS]
    for c in checks:
        assert tok.decode(c["ids"]) == c["text"], (arch, c)

    sidecar = {
        "architecture": arch,
        "generator": "scripts/gen_roster_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "hf_class": spec["cls"],
        "seed": SEED,
        "sequences": {k: {"ids": v, "logits": f"{arch}.logits.{k}.npy", "shape": [len(v), VOCAB]}
                      for k, v in ids.items()},
        "special_token_ids": special_ids(tok_json),
        "logit_stats": {k: logit_stats(v) for k, v in ref.items()},
        "f32_vs_f64_max_abs_diff": f32_noise,
        "q8_0_reference": {
            "logits": f"{arch}.q8_0.logits.main.npy", "sequence": "main",
            "what": "transformers float32 with every Q8_0 tensor of the q8_0 GGUF dequantized (weights-only "
                    "quantization; activations stay float32)",
            "q8_0_tensors": n_q8,
            "max_abs_diff_vs_f32_reference": float(np.abs(ref_q8 - ref["main"]).max()),
            "mean_abs_diff_vs_f32_reference": float(np.abs(ref_q8 - ref["main"]).mean()),
            "top1_agreement_vs_f32_reference": float((ref_q8.argmax(-1) == ref["main"].argmax(-1)).mean()),
        },
        "gguf_tensors_verified_against_checkpoint": n_verified,
        "tokenizer_checks": checks,
        "hf_config": json.loads((d / "config.json").read_text()),
        "gguf": {t: p.name for t, (p, _, _) in files.items()},
    }
    if "dt_min" in extra:
        sidecar["ssm_dt_min_after_softplus"] = extra["dt_min"]
    if arch == "gemma4":
        # how much the final soft-cap matters here: max |capped - uncapped|
        with torch.no_grad():
            h = model.model(input_ids=torch.tensor([ids["main"]]), use_cache=False).last_hidden_state
            raw = model.lm_head(h)[0].numpy()
        sidecar["softcap_effect_max_abs"] = float(np.abs(ref["main"] - raw).max())
        sidecar["uncapped_max_abs"] = float(np.abs(raw).max())
    if arch == "qwen35":
        vcfg, vision = tiny_vision_state(gen, cfg.hidden_size)
        out = outdir / "qwen35.ollama.f32.gguf"
        n = write_ollama_qwen35(gguf_mod, out, extra["text"], extra["mtp"], vision, vcfg, cfg, d,
                                files["f32"][1])
        listing(gguf_mod, out)
        sidecar["gguf"]["ollama_f32"] = out.name
        sidecar["ollama_text_tensors_checked_equal"] = n
    (outdir / f"{arch}.json").write_text(json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{arch}: ok; " + ", ".join(f"{k} std {s['std']:.2f} top1 {s['top1_prob_mean']:.2f} "
                                      f"H {s['entropy_mean_nats']:.2f}" for k, s in sidecar["logit_stats"].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp source tree (convert_hf_to_gguf.py, gguf-py/)")
    ap.add_argument("--only", choices=sorted(ARCHS), action="append", help="build only these architectures")
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.llama_cpp / "gguf-py"))
    import gguf  # the tree's gguf-py, not a pip one
    assert Path(gguf.__file__).resolve().is_relative_to((args.llama_cpp / "gguf-py").resolve()), gguf.__file__
    args.outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="roster-fixtures-") as tmp:
        for arch in args.only or ARCHS:
            build(arch, args.llama_cpp.resolve(), args.outdir.resolve(), gguf, Path(tmp))


if __name__ == "__main__":
    main()
