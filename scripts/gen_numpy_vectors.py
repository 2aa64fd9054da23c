#!/usr/bin/env python3
"""Write the numpy golden vectors that src/nprand and the job draw are checked against.

Usage (from the repository root):  python3 scripts/gen_numpy_vectors.py
Needs numpy (pip install numpy) and ../shared/data/mmlu-pro-stratified.json.

Writes tests/fixtures/numpy/:
  bitgen.json     SeedSequence pools and seed words, PCG64 state, raw 64- and 32-bit draws, random()
  generator.json  sequences of integers / choice(replace=False) / shuffle / random calls on one Generator
  jobs.json       the reference's job draw (spec §3): question_id lists, 30 rounds, 5 paper seeds,
                  standard (4/4/4) and scarce (2/2/2)
128-bit values are written as hex strings, everything else as JSON integers.
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "numpy")
DATA = os.path.join(ROOT, "..", "shared", "data", "mmlu-pro-stratified.json")


def bitgen_vectors():
    cases = []
    for seed in [0, 1, 42, 12345, 98765, 2**32 + 5, 2**64 + 7, 2**100 + 2**70 + 9]:
        ss = np.random.SeedSequence(seed)
        bg = np.random.PCG64(seed)
        st = bg.state["state"]
        raw = [int(v) for v in bg.random_raw(8)]
        # 32-bit draws: integers over exactly 2**32 values take next_uint32 directly.
        g = np.random.Generator(np.random.PCG64(seed))
        u32 = [int(v) for v in g.integers(0, 2**32, size=7, dtype=np.uint64)]
        g = np.random.default_rng(seed)
        floats = [float(g.random()) for _ in range(5)]
        cases.append({
            "seed": hex(seed),
            "pool": [int(v) for v in ss.pool],
            "state_u32": [int(v) for v in ss.generate_state(6, np.uint32)],
            "state_u64": [str(int(v)) for v in ss.generate_state(4, np.uint64)],
            "pcg_state": hex(st["state"]),
            "pcg_inc": hex(st["inc"]),
            "raw_u64": [str(v) for v in raw],
            "next_u32": u32,
            "random": [repr(f) for f in floats],
        })
    return cases


def generator_vectors():
    """Each case: one default_rng(seed), a list of calls made in order on it, and their outputs."""
    programs = [
        [("integers", 0, 10, 20), ("integers", 5, 6, 3), ("integers", -50, 50, 10)],
        [("integers", 0, 2**32, 4), ("integers", 0, 2**32 + 1, 4), ("integers", 0, 2**32 - 1, 4)],
        [("integers", -(2**62), 2**62, 5), ("integers", 0, 2**63 - 1, 3), ("integers", -(2**63), 2**63 - 1, 3)],
        [("integers", 0, 3, 1), ("random", 2), ("integers", 0, 3, 1), ("integers", 0, 3, 1)],
        [("choice", 130, 4), ("choice", 130, 4), ("choice", 130, 4)],
        [("choice", 390, 4), ("choice", 520, 4), ("choice", 390, 4), ("shuffle", 12)],
        [("choice", 10, 10), ("choice", 5, 0), ("choice", 1, 1), ("choice", 2, 1), ("choice", 3, 2)],
        [("choice", 20000, 100), ("choice", 12000, 250), ("choice", 10001, 300)],
        [("choice", 2**33, 3), ("integers", 0, 7, 5)],
        [("shuffle", 0), ("shuffle", 1), ("shuffle", 2), ("shuffle", 7), ("shuffle", 100)],
        [("shuffle", 12), ("integers", 0, 1000, 3), ("shuffle", 6), ("random", 1), ("choice", 50, 7)],
    ]
    cases = []
    for seed in [7, 12345, 42]:
        for prog in programs:
            g = np.random.default_rng(seed)
            outs = []
            for call in prog:
                kind = call[0]
                if kind == "integers":
                    _, lo, hi, n = call
                    outs.append([int(v) for v in g.integers(lo, hi, size=n)])
                elif kind == "choice":
                    _, pop, k = call
                    outs.append([int(v) for v in g.choice(pop, k, replace=False)])
                elif kind == "shuffle":
                    _, n = call
                    x = list(range(n))  # a Python list, as the reference shuffles
                    g.shuffle(x)
                    outs.append(x)
                elif kind == "random":
                    _, n = call
                    outs.append([repr(float(g.random())) for _ in range(n)])
            cases.append({"seed": seed, "calls": [list(c) for c in prog], "outputs": outs})
    return cases


DIFFICULTY_BINS = {
    "easy": ["-----", "----", "---"],
    "medium": ["--", "-", "+", "++"],
    "hard": ["+++", "++++", "+++++"],
}


def draw_jobs(rows, seed, counts, rounds):
    """The reference's sampling (spec §3), on the shared copy of the data set."""
    pools = {d: [r for r in rows if r["difficulty"] in tags] for d, tags in DIFFICULTY_BINS.items()}
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        selected = []
        for d in ["easy", "medium", "hard"]:
            pool = pools[d]
            idx = rng.choice(len(pool), counts[d], replace=False)
            selected.extend(pool[i] for i in idx)
        rng.shuffle(selected)
        selected = selected[: sum(counts.values())]
        out.append([r["question_id"] for r in selected])
    return out


def job_vectors():
    with open(DATA) as f:
        rows = json.load(f)
    out = {"dataset": "../shared/data/mmlu-pro-stratified.json", "rounds": 30, "runs": []}
    for seed in [12345, 19284, 47309, 98765, 42]:
        for name, c in [("standard", 4), ("scarce", 2)]:
            counts = {"easy": c, "medium": c, "hard": c}
            out["runs"].append({"seed": seed, "condition": name, "counts": counts,
                                "question_ids": draw_jobs(rows, seed, counts, 30)})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    meta = {"numpy_version": np.__version__, "python": sys.version.split()[0]}
    for name, data in [("bitgen", bitgen_vectors()), ("generator", generator_vectors()), ("jobs", job_vectors())]:
        path = os.path.join(OUT, name + ".json")
        with open(path, "w") as f:
            json.dump({"generated_by": "scripts/gen_numpy_vectors.py", **meta, "data": data}, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
