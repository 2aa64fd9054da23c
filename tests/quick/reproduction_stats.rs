//! The reproduction statistics against scipy/statsmodels on fixed inputs
//! (`tests/fixtures/reproduction_stats.json`, written by
//! `scripts/gen_reproduction_stats.py`).

use joule::stats::{
    cluster_robust_diff, detectable, holm, holm_declared, t_power, t_quantile, t_sf2,
    two_proportion_z, welch, welch_components, Summary,
};
use serde_json::Value;

fn fixture() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reproduction_stats.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn close(got: f64, want: f64, what: &str) {
    let tol = 1e-9 * want.abs().max(1e-300);
    assert!(
        (got - want).abs() <= tol.max(1e-15),
        "{what}: got {got:e}, scipy/statsmodels {want:e} (rel {:e})",
        ((got - want) / want).abs()
    );
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("number")
}

#[test]
fn student_t_tails_and_quantiles_match_scipy() {
    let d = fixture();
    for c in d["t_sf2"].as_array().unwrap() {
        close(
            t_sf2(f(&c["t"]), f(&c["df"])),
            f(&c["p2"]),
            &format!("t_sf2 {c}"),
        );
    }
    for c in d["t_quantile"].as_array().unwrap() {
        close(
            t_quantile(f(&c["q"]), f(&c["df"])),
            f(&c["x"]),
            &format!("t.ppf {c}"),
        );
    }
}

#[test]
fn welch_from_summary_statistics_matches_scipy() {
    let d = fixture();
    for c in d["welch"].as_array().unwrap() {
        let s = |v: &Value| Summary {
            mean: f(&v[0]),
            sd: f(&v[1]),
            n: v[2].as_u64().unwrap() as usize,
        };
        let t = welch(&s(&c["a"]), &s(&c["b"]));
        close(t.t, f(&c["t"]), &format!("welch t {c}"));
        close(t.p, f(&c["p"]), &format!("welch p {c}"));
        close(t.df, f(&c["df"]), &format!("welch df {c}"));
        close(t.se, f(&c["se"]), &format!("welch se {c}"));
        close(t.ci.0, f(&c["ci"][0]), &format!("welch ci {c}"));
        close(t.ci.1, f(&c["ci"][1]), &format!("welch ci {c}"));
    }
}

#[test]
fn contrast_t_tests_match_their_definition() {
    let d = fixture();
    for c in d["contrast"].as_array().unwrap() {
        let comps: Vec<(f64, f64)> = c["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (f(&x[0]), f(&x[1])))
            .collect();
        let t = welch_components(f(&c["estimate"]), &comps);
        close(t.t, f(&c["t"]), "contrast t");
        close(t.df, f(&c["df"]), "contrast df");
        close(t.p, f(&c["p"]), "contrast p");
        close(t.ci.0, f(&c["ci"][0]), "contrast ci");
        close(t.ci.1, f(&c["ci"][1]), "contrast ci");
    }
}

#[test]
fn holm_matches_statsmodels() {
    let d = fixture();
    for c in d["holm"].as_array().unwrap() {
        let p: Vec<f64> = c["p"].as_array().unwrap().iter().map(f).collect();
        let want: Vec<f64> = c["holm"].as_array().unwrap().iter().map(f).collect();
        for (g, w) in holm(&p).iter().zip(&want) {
            close(*g, *w, &format!("holm {p:?}"));
        }
    }
}

#[test]
fn two_proportion_z_matches_statsmodels() {
    let d = fixture();
    for c in d["two_proportion"].as_array().unwrap() {
        let u = |k: &str| c[k].as_u64().unwrap() as usize;
        let z = two_proportion_z(u("ka"), u("na"), u("kb"), u("nb"));
        close(z.z, f(&c["z"]), "z");
        close(z.p, f(&c["p"]), "p");
        close(z.ci.0, f(&c["ci"][0]), "wald ci");
        close(z.ci.1, f(&c["ci"][1]), "wald ci");
    }
}

#[test]
fn cluster_robust_difference_matches_statsmodels_ols() {
    let d = fixture();
    for c in d["cluster_robust"].as_array().unwrap() {
        let side = |v: &Value| -> Vec<(String, bool)> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x[0].as_str().unwrap().to_string(),
                        x[1].as_i64().unwrap() == 1,
                    )
                })
                .collect()
        };
        let z = cluster_robust_diff(&side(&c["a"]), &side(&c["b"]));
        close(z.estimate, f(&c["estimate"]), "estimate");
        close(z.se, f(&c["se"]), "cluster se");
        close(z.df, f(&c["df"]), "cluster t df (G − 1)");
        assert_eq!(z.clusters_a + z.clusters_b, z.df as usize + 1);
        close(z.p, f(&c["p"]), "cluster p");
        close(z.ci.0, f(&c["ci"][0]), "cluster ci");
        close(z.ci.1, f(&c["ci"][1]), "cluster ci");
    }
}

#[test]
fn holm_over_a_declared_family_matches_statsmodels_with_the_rest_at_one() {
    let d = fixture();
    for c in d["holm_declared"].as_array().unwrap() {
        let p: Vec<f64> = c["p"].as_array().unwrap().iter().map(f).collect();
        let m = c["m"].as_u64().unwrap() as usize;
        let want: Vec<f64> = c["holm"].as_array().unwrap().iter().map(f).collect();
        for (g, w) in holm_declared(&p, m).iter().zip(&want) {
            close(*g, *w, &format!("holm of {p:?} in a family of {m}"));
        }
    }
}

#[test]
fn power_and_detectable_differences_match_scipys_noncentral_t() {
    let d = fixture();
    for c in d["detectable"].as_array().unwrap() {
        let (se, df, alpha) = (f(&c["se"]), f(&c["df"]), f(&c["alpha"]));
        let want = f(&c["detectable"]);
        let got = detectable(se, df, alpha);
        assert!(
            ((got - want) / want).abs() < 1e-7,
            "detectable {c}: got {got}, scipy {want}"
        );
        for x in c["power_at"].as_array().unwrap() {
            let (ncp, p) = (f(&x[0]), f(&x[1]));
            let got = t_power(ncp, df, alpha);
            assert!(
                (got - p).abs() < 1e-8,
                "power at {ncp} (df {df}, α {alpha}): got {got}, scipy {p}"
            );
        }
    }
}
