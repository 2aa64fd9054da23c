#!/usr/bin/env python3
"""Expected values for the reproduction statistics (src/stats.rs).

Computes, with scipy and statsmodels, every closed-form statistic `joule report --against`
uses, on fixed inputs, and writes them to tests/fixtures/reproduction_stats.json, which
tests/quick/reproduction_stats.rs checks the Rust functions against (relative tolerance 1e-9).

    pip install scipy statsmodels
    python3 scripts/gen_reproduction_stats.py

- Student's t: two-sided tail `2*t.sf(|t|, df)` and quantiles `t.ppf(q, df)` (fractional df);
- Welch's t from summary statistics: scipy.stats.ttest_ind_from_stats(equal_var=False),
  the Welch-Satterthwaite df, and the 95 % interval d ± t.ppf(0.975, df)·se;
- the t test of a contrast of several independent means (Welch-Satterthwaite over every
  variance component; the size test of the effects table), from its definition;
- Holm: statsmodels.stats.multitest.multipletests(method="holm");
- two proportions: statsmodels proportions_ztest (pooled z) and
  confint_proportions_2indep(compare="diff", method="wald");
- cluster-robust difference of two rates: statsmodels OLS(y, [1, group]).fit(cov_type="cluster",
  use_t=True) (t reference with G - 1 df), including a case with 4 clusters a side;
- the power of a two-sided t test (scipy's noncentral t) and the detectable difference at 80 %
  power (the noncentrality where it reaches 0.8, times the standard error);
- Holm over a declared family of m tests (fewer p-values than m), from its definition.
"""
import json
import os

import numpy as np
import scipy
import statsmodels
from scipy import stats
import statsmodels.api as sm
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportions_ztest, confint_proportions_2indep

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "reproduction_stats.json")


def t_cases():
    out = []
    for t, df in [(0.5, 4.0), (2.0, 4.0), (2.776445105197793, 4.0), (1.0, 7.3), (3.5, 2.2),
                  (0.1, 30.0), (6.0, 5.0), (12.0, 8.0), (1.96, 1000.0), (4.2, 1.0)]:
        out.append({"t": t, "df": df, "p2": float(2 * stats.t.sf(abs(t), df))})
    return out


def q_cases():
    return [{"q": q, "df": df, "x": float(stats.t.ppf(q, df))}
            for q, df in [(0.975, 4.0), (0.975, 1.0), (0.975, 5.37), (0.975, 8.0),
                          (0.975, 2.5), (0.975, 60.0), (0.9, 3.0), (0.995, 12.5)]]


def welch_cases():
    # (a: mean, sd, n) vs (b: mean, sd, n): run summaries against the paper's figures.
    inputs = [
        (14.0, 9.460443964212251, 5, 14.0, 9.5, 5),     # reference agent_4 vs the paper
        (5.2, 1.6431676725154984, 5, 5.2, 1.6, 5),
        (19.2, 2.588435821108957, 5, 19.2, 2.6, 5),
        (12.8, 3.8987177379235853, 5, 8.6, 2.3021728866442674, 5),
        (30.0, 0.0, 5, 14.0, 9.5, 5),                    # one sd 0
        (29.6, 0.8944271909999159, 5, 30.0, 0.0, 5),     # one-sample t against an every-run value
        (1.2, 0.3, 10, 1.51, 0.5, 5),
        (0.95, 0.05, 3, 1.03, 0.14, 5),
    ]
    out = []
    for m1, s1, n1, m2, s2, n2 in inputs:
        res = stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False)
        v1, v2 = s1 * s1 / n1, s2 * s2 / n2
        se = np.sqrt(v1 + v2)
        den = (v1 * v1 / (n1 - 1) if v1 > 0 else 0.0) + (v2 * v2 / (n2 - 1) if v2 > 0 else 0.0)
        df = (v1 + v2) ** 2 / den
        half = stats.t.ppf(0.975, df) * se
        d = m1 - m2
        out.append({"a": [m1, s1, n1], "b": [m2, s2, n2], "t": float(res.statistic),
                    "p": float(res.pvalue), "df": float(df), "se": float(se),
                    "ci": [float(d - half), float(d + half)]})
    return out


def contrast_cases():
    # estimate, [(variance, df), ...]: Welch-Satterthwaite over every component.
    inputs = [
        (1.0, [(3.04, 4.0), (1.06, 4.0), (15.21 / 5, 4.0), (5.29 / 5, 4.0)]),
        (-2.5, [(0.8, 4.0), (0.0, 4.0), (0.512, 4.0)]),
        (7.0, [(2.0, 9.0), (1.5, 3.0)]),
    ]
    out = []
    for est, comps in inputs:
        var = sum(v for v, _ in comps)
        df = var ** 2 / sum(v * v / d for v, d in comps if v > 0)
        se = np.sqrt(var)
        t = est / se
        half = stats.t.ppf(0.975, df) * se
        out.append({"estimate": est, "components": comps, "t": float(t), "df": float(df),
                    "p": float(2 * stats.t.sf(abs(t), df)),
                    "ci": [float(est - half), float(est + half)]})
    return out


def holm_cases():
    out = []
    for p in [[0.01, 0.04, 0.03, 0.5], [0.001, 0.2, 0.0004, 0.05, 0.049, 0.9, 1.0],
              [0.3], [0.02, 0.02, 0.02]]:
        _, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
        out.append({"p": p, "holm": [float(x) for x in adj]})
    return out


def two_prop_cases():
    out = []
    for k1, n1, k2, n2 in [(30, 100, 45, 120), (5, 40, 20, 41), (120, 400, 980, 3245), (0, 50, 3, 60)]:
        z, p = proportions_ztest([k1, k2], [n1, n2])
        lo, hi = confint_proportions_2indep(k1, n1, k2, n2, compare="diff", method="wald")
        out.append({"ka": k1, "na": n1, "kb": k2, "nb": n2, "z": float(z), "p": float(p),
                    "ci": [float(lo), float(hi)]})
    return out


def cluster_cases():
    rng = np.random.default_rng(29)
    out = []
    for n_a, g_a, pa, n_b, g_b, pb in [(120, 12, 0.3, 300, 40, 0.45), (60, 6, 0.6, 80, 20, 0.5),
                                       (40, 4, 0.3, 40, 4, 0.6)]:
        ya = (rng.random(n_a) < pa).astype(int)
        yb = (rng.random(n_b) < pb).astype(int)
        ca = [f"m{i % g_a}" for i in range(n_a)]
        cb = [f"h{i % g_b}" for i in range(n_b)]
        y = np.concatenate([ya, yb]).astype(float)
        x = np.concatenate([np.ones(n_a), np.zeros(n_b)])
        X = np.column_stack([np.ones(n_a + n_b), x])
        groups = np.array([int(c[1:]) + (0 if c[0] == "m" else 10_000) for c in ca + cb])
        fit = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
        lo, hi = fit.conf_int()[1]
        out.append({"a": [[c, int(v)] for c, v in zip(ca, ya)],
                    "b": [[c, int(v)] for c, v in zip(cb, yb)],
                    "estimate": float(fit.params[1]), "se": float(fit.bse[1]),
                    "p": float(fit.pvalues[1]), "df": float(fit.df_resid_inference),
                    "ci": [float(lo), float(hi)]})
    return out


def detectable_cases():
    # The smallest ncp * se at which a two-sided t test at level alpha has power 0.8 (noncentral t),
    # and the power at a few other points.
    from scipy.optimize import brentq

    def power(ncp, df, alpha):
        crit = stats.t.ppf(1 - alpha / 2, df)
        return stats.nct.sf(crit, df, ncp) + np.nan_to_num(stats.nct.cdf(-crit, df, ncp))

    out = []
    for se, df, alpha in [(1.0, 8.0, 0.05), (0.5, 4.0, 0.05 / 11), (2.3, 6.3, 0.05 / 9),
                          (0.1, 30.0, 0.01), (1.0, 2.5, 0.05 / 3), (1.0, 1.5, 0.05 / 2)]:
        ncp = brentq(lambda x: power(x, df, alpha) - 0.8, 0.0, 60.0, xtol=1e-13, rtol=1e-14)
        out.append({"se": se, "df": df, "alpha": alpha, "detectable": float(ncp * se),
                    "power_at": [[x, float(power(x, df, alpha))] for x in (0.5, 2.0, 4.0)]})
    return out


def holm_declared_cases():
    out = []
    for p, m in [([0.01, 0.04, 0.03], 5), ([0.001, 0.2], 10), ([0.02, 0.5, 0.3, 0.01], 4)]:
        padded = p + [1.0] * (m - len(p))
        _, adj, _, _ = multipletests(padded, alpha=0.05, method="holm")
        out.append({"p": p, "m": m, "holm": [float(x) for x in adj[:len(p)]]})
    return out


def main():
    data = {
        "generator": "scripts/gen_reproduction_stats.py",
        "versions": {"scipy": scipy.__version__, "statsmodels": statsmodels.__version__,
                     "numpy": np.__version__},
        "t_sf2": t_cases(),
        "t_quantile": q_cases(),
        "welch": welch_cases(),
        "contrast": contrast_cases(),
        "holm": holm_cases(),
        "two_proportion": two_prop_cases(),
        "cluster_robust": cluster_cases(),
        "detectable": detectable_cases(),
        "holm_declared": holm_declared_cases(),
    }
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
