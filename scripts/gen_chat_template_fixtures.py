#!/usr/bin/env python3
"""Render the chat templates of ../shared/data/chat-templates/ with Python jinja2,
in the environment Hugging Face transformers uses for apply_chat_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
json.dumps-style tojson, raise_exception, strftime_now), and write the expected
strings to tests/fixtures/chat_templates/<template>.json for the Rust tests
(src/inference/text/chat_template.rs).

Usage (from the repository root): pip install jinja2 && python3 scripts/gen_chat_template_fixtures.py
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(ROOT, "..", "shared", "data", "chat-templates")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

# bos/eos strings per template file (what each model's tokenizer_config gives).
SPECIAL = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "Qwen3.5-4B.jinja": ("", "<|im_end|>"),
    "google-gemma-4-31B-it.jinja": ("<bos>", "<eos>"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("<s>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
}

CONVERSATIONS = {
    "system_user_assistant_user": [
        {"role": "system", "content": "You are an agent in a society. Energy: 12.5."},
        {"role": "user", "content": "Round 1: choose a job. Reply in JSON."},
        {"role": "assistant", "content": "{\"job\": 3, \"reason\": \"médium — ok\"}"},
        {"role": "user", "content": "Round 2: vote for a leader.\nCandidates: A, B."},
    ],
    "user_thinking_assistant_user": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ],
}

FIXED_NOW = datetime(2026, 1, 15, 9, 30, 0)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers' chat template tojson: json.dumps, non-ASCII kept.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    os.makedirs(OUT, exist_ok=True)
    env = make_env()
    for name in sorted(os.listdir(TEMPLATES)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
            source = f.read()
        template = env.from_string(source)
        bos, eos = SPECIAL[name]
        cases = []
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (False, True):
                for thinking in (None, True, False):
                    kwargs = dict(messages=messages, tools=None, documents=None,
                                  add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                    if thinking is not None:
                        kwargs["enable_thinking"] = thinking
                    try:
                        expected = template.render(**kwargs)
                        error = None
                    except jinja2.exceptions.TemplateError as e:
                        expected = None
                        error = str(e)
                    cases.append({
                        "conversation": conv_name,
                        "add_generation_prompt": agp,
                        "enable_thinking": thinking,
                        "expected": expected,
                        "error": error,
                    })
        fixture = {
            "template": name,
            "bos_token": bos,
            "eos_token": eos,
            "conversations": CONVERSATIONS,
            "cases": cases,
        }
        out = os.path.join(OUT, name.replace(".jinja", ".json"))
        with open(out, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {out}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
