#!/usr/bin/env python3
"""Expected values for the race's human-versus-model analysis (src/race/{logit,human,archetype}.rs).

Usage (from the repository root):
    pip install statsmodels scikit-learn pandas
    python3 scripts/gen_race_analysis_fixtures.py

Reads the human experiment's data set in place (../shared/data/ai-race/airace_deidentified_long.csv;
never copied into the repository) and tests/fixtures/race_analysis/scripted_logit_sample.csv (the
logit sample `joule race report` writes for configs/ai-race/logit-fixture-scripted.toml; the Rust
test regenerates it and checks it is unchanged). Writes tests/fixtures/race_analysis/:

  human_logit.json     the six nested cluster-robust logits on the human analysed sample (rounds >= 2,
                       covariate-complete, gap and age centred, controls C(sex) + age_c +
                       C(nationality_group) + risk_gamble_choice, clustered on the pair group_id)
  scripted_logit.json  the six logits on the scripted sweep's sample (controls as the sample's
                       `controls` column lists them, clustered on `cluster`)
  human_kmeans.json    the five archetype features per participant, the human mean/SD, and
                       KMeans(n_clusters=4, random_state=0, n_init=10) on the z-scores: labels,
                       centroids, inertia

Every fit is statsmodels `Logit(...).fit(cov_type="cluster", cov_kwds={"groups": ...})`.
"""
import json
import os

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from sklearn.cluster import KMeans

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUMAN = os.path.join(ROOT, "..", "shared", "data", "ai-race", "airace_deidentified_long.csv")
OUT = os.path.join(ROOT, "tests", "fixtures", "race_analysis")

# The six nested specifications (spec section 8); controls are appended.
SPECS = [
    ("1", "unsafe ~ C(max_private_risk)"),
    ("2", "unsafe ~ C(max_private_risk) + own_prev_unsafe + opponent_prev_unsafe + progress_gap_before"),
    ("3", "unsafe ~ C(max_private_risk) + own_prev_unsafe * opponent_prev_unsafe * progress_gap_before"),
    ("4", "unsafe ~ C(max_private_risk) + first_round_unsafe"),
    ("5", "unsafe ~ C(max_private_risk) + first_round_unsafe + own_prev_unsafe + opponent_prev_unsafe"
          " + progress_gap_before"),
    ("6", "unsafe ~ C(max_private_risk) + first_round_unsafe + own_prev_unsafe * opponent_prev_unsafe"
          " * progress_gap_before"),
]

# Age bins to their midpoints (the reference's mapping).
AGE_MID = {"18-22": 20, "23-27": 25, "28-32": 30, "33-37": 35, "38-42": 40,
           "43-47": 45, "48-52": 50, "53-57": 55, "58-62": 60, "63-67": 65, "68-72": 70}


def fit_all(data, controls, groups):
    out = []
    for name, formula in SPECS:
        f = formula + "".join(" + " + c for c in controls)
        res = smf.logit(f, data=data).fit(disp=False, cov_type="cluster", cov_kwds={"groups": groups},
                                          method="newton", maxiter=100, tol=1e-12)
        terms = {}
        for t in res.params.index:
            terms[t] = {"coef": float(res.params[t]), "se": float(res.bse[t]),
                        "z": float(res.tvalues[t]), "p": float(res.pvalues[t])}
        out.append({"specification": name, "formula": f, "nobs": int(res.nobs),
                    "n_clusters": int(pd.Series(groups).nunique()), "llf": float(res.llf),
                    "converged": bool(res.mle_retvals.get("converged", False)), "terms": terms})
    return out


def human_sample(df):
    d = df[df["round_number"] > 1].copy()
    d = d[d["sex"] != "CONSENT_REVOKED"]
    d = d[~d["nationality_group"].isin(["DATA_EXPIRED", "CONSENT_REVOKED"])]
    d["age_numeric"] = d["age"].map(AGE_MID)
    d = d.dropna(subset=["decision", "decision_lag", "decision_opponent_lag", "delta_steps_lag",
                         "risk_gamble_choice", "age_numeric"])
    first = df[df["round_number"] == 1].set_index("participant_id")["decision"]
    s = pd.DataFrame({
        "unsafe": d["decision"].astype(int),
        "max_private_risk": d["max_private_risk"],
        "own_prev_unsafe": d["decision_lag"].astype(int),
        "opponent_prev_unsafe": d["decision_opponent_lag"].astype(int),
        "progress_gap_before": d["delta_steps_lag"] - d["delta_steps_lag"].mean(),
        "first_round_unsafe": d["participant_id"].map(first).astype(int),
        "sex": d["sex"],
        "age_c": d["age_numeric"] - d["age_numeric"].mean(),
        "nationality_group": d["nationality_group"],
        "risk_gamble_choice": d["risk_gamble_choice"],
        "group_id": d["group_id"],
    })
    return s


def safe_diff(df, col, a, b):
    x, y = df.loc[a, col], df.loc[b, col]
    if len(x) == 0 or len(y) == 0:
        return np.nan
    return float(x.mean() - y.mean())


def human_features(df):
    rows = []
    for pid, g in df.groupby("participant_id", sort=True):
        later = g[g["round_number"] > 1]
        rows.append({
            "participant_id": pid,
            "overall_unsafe_rate": float(g["decision"].mean()),
            "reciprocity": safe_diff(later, "decision", later["decision_opponent_lag"] == 1,
                                     later["decision_opponent_lag"] == 0),
            "position_sensitivity": safe_diff(later, "decision", later["delta_steps_lag"] > 0,
                                              later["delta_steps_lag"] < 0),
            "own_autocorrelation": safe_diff(later, "decision", later["decision_lag"] == 1,
                                             later["decision_lag"] == 0),
            "first_round_unsafe": float(g.loc[g["round_number"] == 1, "decision"].iloc[0]),
        })
    return pd.DataFrame(rows)


FEATURES = ["overall_unsafe_rate", "reciprocity", "position_sensitivity", "own_autocorrelation",
            "first_round_unsafe"]


def main():
    os.makedirs(OUT, exist_ok=True)
    df = pd.read_csv(HUMAN)

    s = human_sample(df)
    human = {
        "source": "airace_deidentified_long.csv (rounds >= 2, covariate-complete; gap and age centred)",
        "nobs": int(len(s)), "n_clusters": int(s["group_id"].nunique()),
        "gap_mean": float(df.loc[s.index, "delta_steps_lag"].mean()),
        "fits": fit_all(s, ["C(sex)", "age_c", "C(nationality_group)", "risk_gamble_choice"],
                        s["group_id"]),
    }
    with open(os.path.join(OUT, "human_logit.json"), "w") as f:
        json.dump(human, f, indent=1, sort_keys=True)
    print("human logit: N =", human["nobs"], "clusters =", human["n_clusters"])

    sample_path = os.path.join(OUT, "scripted_logit_sample.csv")
    if os.path.exists(sample_path):
        d = pd.read_csv(sample_path, dtype={"model": str, "prompt_version": str, "run_phase": str,
                                            "persona_condition": str, "cluster": str})
        controls = [c for c in str(d["controls"].iloc[0]).split(";") if c]
        scripted = {"source": "scripted_logit_sample.csv", "nobs": int(len(d)),
                    "n_clusters": int(d["cluster"].nunique()), "controls": controls,
                    "fits": fit_all(d, controls, d["cluster"])}
        with open(os.path.join(OUT, "scripted_logit.json"), "w") as f:
            json.dump(scripted, f, indent=1, sort_keys=True)
        print("scripted logit: N =", scripted["nobs"], "clusters =", scripted["n_clusters"],
              "controls", controls)
    else:
        print("no", sample_path, "yet: run the Rust side first (see the docstring)")

    feats = human_features(df)
    imputed = feats.copy()
    for c in FEATURES:
        imputed[c] = imputed[c].fillna(imputed[c].mean())
    mean = imputed[FEATURES].mean()
    std = imputed[FEATURES].std()
    z = (imputed[FEATURES] - mean) / std
    km = KMeans(n_clusters=4, random_state=0, n_init=10)
    labels = km.fit_predict(z)
    out = {
        "features": FEATURES,
        "participants": feats["participant_id"].tolist(),
        "raw": [[None if np.isnan(v) else float(v) for v in row] for row in feats[FEATURES].values],
        "mean": [float(mean[c]) for c in FEATURES],
        "std": [float(std[c]) for c in FEATURES],
        "labels": [int(x) for x in labels],
        "centroids": [[float(v) for v in c] for c in km.cluster_centers_],
        "inertia": float(km.inertia_),
        "sizes": [int((labels == k).sum()) for k in range(4)],
    }
    with open(os.path.join(OUT, "human_kmeans.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("kmeans sizes", out["sizes"], "inertia", out["inertia"])


if __name__ == "__main__":
    main()
