#!/usr/bin/env python3
"""Tiny-width manifests of the roster's models with their real vocabularies, for checks that
exercise every kind of layer in minutes (scripts/gpu-check.sh's dry run, benches/trace-vs-llama.sh
SMOKE=1): each manifest's [synth] table gets hidden 256 and small heads, the rest kept.

Usage: scripts/tiny-manifests.py MODELS_DIR OUT_DIR NAME...   (then JOULE_MODELS_DIR=OUT_DIR)
"""
import re
import sys

src, dst, names = sys.argv[1], sys.argv[2], sys.argv[3:]
common = {"hidden": 256, "heads": 2, "kv_heads": 1, "head_dim": 128, "ffn": 512}
arch = {
    "gemma4-e4b": {"head_dim_swa": 64, "per_layer_dim": 32},
    "nemotron-3-nano-4b": {"ssm_state": 16, "ssm_groups": 2, "ssm_heads": 8, "ssm_head_dim": 32},
    "qwen3.5-4b": {"ssm_state": 64, "ssm_groups": 2, "ssm_heads": 4, "rope_dims": 32,
                   "rope_sections": "[6, 5, 5, 0]"},
    "qwen3.5-9b": {"ssm_state": 64, "ssm_groups": 2, "ssm_heads": 4, "rope_dims": 32,
                   "rope_sections": "[6, 5, 5, 0]"},
    "qwen3-8b": {},
}
for n in names:
    text = open(f"{src}/{n}.toml").read()
    head, sep, synth = text.partition("[synth]")
    assert sep, f"{n}: no [synth] table"
    for k, v in {**common, **arch[n]}.items():
        synth, count = re.subn(rf"(?m)^{k} = .*$", f"{k} = {v}", synth)
        assert count == 1, f"{n}: key {k} found {count} times"
    open(f"{dst}/{n}.toml", "w").write(head + sep + synth)
