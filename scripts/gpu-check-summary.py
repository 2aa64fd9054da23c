#!/usr/bin/env python3
"""Writes scripts/gpu-check.sh's summary.md and summary.json from its step logs.

Usage: gpu-check-summary.py LOGS_DIR OUT_DIR START_EPOCH

LOGS_DIR holds steps.jsonl (one JSON line per step: step, status, seconds, note, output),
env.json and each step's output; the JSON outputs of these steps are read into tables:

- synth-<model>            the synthesized file (its size is in the step's note);
- logits-<model>           `joule logits --against --json`: the device's logits against the CPU's;
- bench-<model>            `joule bench --json` at 1, 16 and 64 sequences;
- bench-matmul             `joule bench matmul --json`: tokens/s per quant type;
- trace-roster             `joule bench trace --models ... --json`: the paper's workload (the
                           reference runs' round 1 at once, each call at its recorded length
                           times a scale) and the grid estimate it prints, with its assumptions
                           (or trace-roster-fit: as many runs as the memory plan allowed);
- bench-society-roster     `joule bench society --models ... --json`: 60 concurrent societies,
                           every agent on its own real-size model, and from its generated
                           tokens/s the estimated time of the paper's grid (or
                           bench-society-roster-fit: as many as the memory plan allowed);
- smollm2-bench*, joules-* the SmolLM2 bench and the calibration (as before).

Both files are written to a temporary name and renamed, so a reader (or a second writer: the
background synthesis also records steps) never sees half a file. Standard library only.
"""
import json
import os
import sys
import time

# The paper's grid: 60 runs, about 37 M generated tokens (JOULE_GRID_TOKENS overrides).
GRID_RUNS = int(os.environ.get("JOULE_GRID_RUNS", "60"))
GRID_TOKENS = float(os.environ.get("JOULE_GRID_TOKENS", "37e6"))


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a step cut short leaves no or half a file
        return {"error": f"{type(e).__name__}: {e}"}


def write_atomic(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def fmt(x, spec=".1f"):
    return format(x, spec) if isinstance(x, (int, float)) else "—"


def main():
    logs, dest, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    steps = []
    with open(os.path.join(logs, "steps.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    steps.append(json.loads(line))
                except ValueError:
                    pass  # a line being written right now
    env = load(os.path.join(logs, "env.json"))
    if "error" in env:
        env = {}

    def output(s):
        if s.get("output", "").endswith(".json"):
            return load(os.path.join(logs, s["output"]))
        return None

    by_name = {s["step"]: s for s in steps}
    doc = {"elapsed_s": round(time.time() - start, 1), "env": env, "steps": steps}
    md = ["# Joule GPU check", ""]
    if env:
        md += [f"- GPU: {env.get('gpu', '?')} (compute capability {env.get('compute_cap', '?')}, "
               f"{env.get('memory', '?')}), driver {env.get('driver', '?')}; device `{env.get('device', '?')}`",
               f"- commit: {env.get('commit', '?')}; executables: {env.get('executables', '?')}", ""]
        if env.get("dry_run"):
            md += ["**CPU dry run**: tiny models (real vocabularies, small widths and few layers), "
                   "every step on the CPU; the numbers test the script, not a GPU.", ""]
    md += [f"Elapsed: {doc['elapsed_s']} s", "", "| step | status | seconds | note |", "|---|---|---|---|"]
    for s in steps:
        md.append(f"| {s['step']} | {s['status']} | {s['seconds']:.1f} | {s['note']} |")

    # ---- Real-size models: logits against the CPU, and joule bench at 1, 16, 64 sequences.
    models = []
    for s in steps:
        if s["step"].startswith("synth-"):
            models.append(s["step"][len("synth-"):])
    real = {}
    rows = []
    for m in models:
        entry = {"synth": by_name.get(f"synth-{m}")}
        lg = by_name.get(f"logits-{m}")
        cmp = None
        if lg:
            res = output(lg)
            entry["logits"] = res
            cmp = res.get("comparison") if isinstance(res, dict) else None
        bench = by_name.get(f"bench-{m}")
        tg, pp = {}, {}
        if bench:
            res = output(bench)
            entry["bench"] = res
            if isinstance(res, list):
                for r in res:
                    key = r.get("seqs")
                    (pp if r.get("n_prompt", 0) > 0 else tg)[key] = r.get("avg_ts")
        real[m] = entry

        def agree(c, part):
            a = (c or {}).get(part) or {}
            if not a:
                return "—"
            return f"{fmt(a.get('max_abs_diff'), '.3f')} / {fmt(a.get('mean_kl'), '.5f')} / {fmt(a.get('top1'), '.2f')}"

        size = (entry["synth"] or {}).get("note", "")
        verdict = "—" if not cmp else ("pass" if cmp.get("pass") else "FAIL")
        rows.append(f"| {m} | {size} | {agree(cmp, 'prefill')} | {agree(cmp, 'decode')} | {verdict} | "
                    + " | ".join(fmt(pp.get(n)) for n in (1, 16, 64)) + " | "
                    + " | ".join(fmt(tg.get(n)) for n in (1, 16, 64)) + " |")
    doc["real_size"] = real
    if rows:
        md += ["", f"## The roster's models at full size (synthesized Q4_K_M) on `{env.get('device', '?')}`", "",
               "Logits: this device against the CPU, both a prompt of 16 in one pass then 16 decode steps, "
               "`max |diff| / mean KL / top-1`; bench: tokens/s of all sequences together "
               "(`joule bench`, sizes in the step logs).", "",
               "| model | file | logits, prompt | logits, decode | logits | pp t/s ×1 | pp ×16 | pp ×64 | tg t/s ×1 | tg ×16 | tg ×64 |",
               "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"] + rows

    # ---- Tokens/s per quant type.
    mm = by_name.get("bench-matmul")
    if mm:
        res = output(mm)
        doc["matmul"] = res
        if isinstance(res, list) and res:
            r0 = res[0]
            md += ["", f"## Tokens/s per quant type ({r0.get('backend')}, one {r0.get('n')}×{r0.get('k')} matrix, "
                       "`joule bench matmul`)", "",
                   "rows/s: activation rows (tokens) per second through the matrix; est. 8 B: the tokens/s "
                   "of an 8 B-parameter model of that type if every matrix ran at this rate (no attention).", "",
                   "| type | rows | ms | rows/s | weight GB/s | est. t/s, 8 B model |", "|---|---:|---:|---:|---:|---:|"]
            for r in res:
                md.append(f"| {r.get('dtype')} | {r.get('rows')} | {fmt(r.get('seconds', 0) * 1e3, '.3f')} | "
                          f"{fmt(r.get('rows_per_s'), '.0f')} | {fmt(r.get('weight_gbs'))} | {fmt(r.get('est_8b_tps'))} |")

    # ---- The paper's workload: the reference runs replayed on the roster (`bench trace`).
    tr = by_name.get("trace-roster")
    tr_fit = by_name.get("trace-roster-fit")
    if tr_fit and tr_fit.get("status") == "pass":
        tr = tr_fit  # the ten did not fit in the GPU's memory; as many as the plan allowed did
    if tr:
        r = output(tr)
        if isinstance(r, dict) and "grid" in r:
            g = r.get("grid") or {}
            doc["trace"] = {k: v for k, v in r.items() if k != "call_log"}
            doc["trace_grid_estimate"] = {"hours": g.get("hours"), "runs": g.get("runs"),
                                          "assumptions": g.get("assumptions")}
            e = r.get("engine") or {}
            md += ["", f"## The paper's workload: {len(r.get('runs') or [])} reference run(s), "
                       f"{r.get('runs_at_once')} at once, rounds {r.get('rounds', ['?', '?'])[0]}.."
                       f"{r.get('rounds', ['?', '?'])[1]}, token scale {r.get('token_scale')} "
                       "(`joule bench trace`)", "",
                   "| complete | load s | wall s | calls (failed, cut) | generated tokens | gen t/s | prompt tokens | prompt t/s | from the prefix cache | prefill s | decode s |",
                   "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                   f"| {'yes' if r.get('complete') else 'no (time limit)'} | {fmt(r.get('load_s'))} | "
                   f"{fmt(r.get('wall_s'))} | {r.get('calls')} ({r.get('failed_calls')}, {r.get('cut_calls')}) | "
                   f"{r.get('generated_tokens')} | {fmt(r.get('generated_tps'))} | {r.get('prompt_tokens')} | "
                   f"{fmt(r.get('prompt_tps'))} | {e.get('reused_prefix_tokens', '—')} | "
                   f"{fmt((e.get('prefill_ms') or 0) / 1e3) if e else '—'} | "
                   f"{fmt((e.get('decode_ms') or 0) / 1e3) if e else '—'} |", ""]
            hours = g.get("hours")
            if isinstance(hours, (int, float)):
                md += [f"**Estimated time of the paper's grid** ({g.get('runs')} runs, "
                       f"{(g.get('generated_tokens') or 0) / 1e6:.1f} M generated tokens) on this machine: "
                       f"**{hours:.2f} h**, assuming:", ""]
            else:
                md += ["**Estimated time of the paper's grid**: none.", ""]
            md += [f"- {a}" for a in g.get("assumptions") or []]
        else:
            doc["trace"] = r

    # ---- 60 concurrent societies, every agent on its own model; the grid's estimate.
    soc = by_name.get("bench-society-roster")
    fit = by_name.get("bench-society-roster-fit")
    if fit and fit.get("status") == "pass":
        soc = fit  # the 60 did not fit in the GPU's memory; as many as the plan allowed did
    if soc:
        res = output(soc)
        doc["society"] = res
        r = res[0] if isinstance(res, list) and res else None
        if r:
            tps = r.get("generated_tps") or 0
            est = {"grid_runs": GRID_RUNS, "grid_generated_tokens": GRID_TOKENS,
                   "measured_generated_tps": tps, "sims": r.get("sims")}
            if tps > 0:
                est["hours"] = GRID_TOKENS / tps / 3600
            doc["grid_estimate"] = est
            md += ["", f"## {r.get('sims')} concurrent societies, every agent on its own model, "
                       f"{r.get('rounds')} round(s) (`joule bench society --models`)", "",
                   "| finished | load s | wall s | calls (failed) | generated tokens | gen t/s | prompt tokens (computed) | prefill s | decode s | engine s |",
                   "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                   f"| {r.get('finished')} of {r.get('sims')}{'' if r.get('complete') else ' (time limit)'} | "
                   f"{fmt(r.get('load_s'))} | {fmt(r.get('wall_s'))} | {r.get('calls')} ({r.get('failed_calls')}) | "
                   f"{r.get('generated_tokens')} | {fmt(tps)} | {r.get('prompt_tokens')} ({r.get('computed_prompt_tokens')}) | "
                   f"{fmt(r.get('prefill_s'))} | {fmt(r.get('decode_s'))} | {fmt(r.get('engine_s'))} |", ""]
            if tps > 0:
                same = r.get("sims") == GRID_RUNS
                rate_of = (f"the rate of {r.get('sims')} societies running together in their first "
                           if r.get("sims") != 1 else "the rate of one society alone in its first ")
                md += [f"**Estimated time of the paper's grid** ({GRID_RUNS} runs, {GRID_TOKENS / 1e6:.0f} M generated "
                       f"tokens) on this machine: **{est['hours']:.1f} h** = {GRID_TOKENS:.3g} tokens / {tps:.1f} "
                       f"generated tokens/s, {rate_of}"
                       + ("round (the grid's runs also run together). " if same else
                          f"round (not the grid's {GRID_RUNS} at once, so this is not the grid's rate). ")
                       + "Assumes later rounds generate at that rate: "
                       "their longer prompts are mostly reused from each agent's state, but as agents die the "
                       "batches shrink, so the real time is likely longer. Model loading "
                       f"({fmt(r.get('load_s'))} s here) is not counted."]

    # ---- SmolLM2 and calibration (the older steps).
    bench = {s["step"]: output(s) for s in steps
             if s["step"].startswith("smollm2-bench") and s["status"] == "pass"}
    doc["bench"] = bench
    brows = []
    for name, res in bench.items():
        if isinstance(res, list):
            for r in res:
                brows.append(f"| {name} | {r.get('test')} | {r.get('seqs')} | "
                             f"{r.get('avg_ts', 0):.1f} ± {r.get('stddev_ts', 0):.1f} |")
    if brows:
        md += ["", "## joule bench (SmolLM2-135M-Instruct Q4_1)", "",
               "| run | test | sequences | tokens/s |", "|---|---|---|---|"] + brows
    joules = {s["step"]: output(s) for s in steps
              if s["step"].startswith("joules-") and s["status"] == "pass"}
    doc["joules"] = joules
    jrows = []
    for name, res in joules.items():
        for p in (res.get("points") or []) if isinstance(res, dict) else []:
            jrows.append(f"| {p.get('model')} | {p.get('size_b', 0):.4f} | {p.get('batch')} | "
                         f"{p.get('j_per_prompt_token', 0):.6f} | {p.get('j_per_generated_token', 0):.6f} |")
    if jrows:
        meter = next((r.get("meter") for r in joules.values() if isinstance(r, dict) and r.get("meter")), "?")
        md += ["", f"## Joules per token (joule calibrate, meter {meter})", "",
               "| model | S (B) | batch | J/prompt token | J/generated token |", "|---|---|---|---|---|"] + jrows

    write_atomic(os.path.join(dest, "summary.json"), json.dumps(doc, indent=2))
    write_atomic(os.path.join(dest, "summary.md"), "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
