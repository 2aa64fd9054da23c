//! The race's human-versus-model analysis against statsmodels and
//! scikit-learn (expected values from `scripts/gen_race_analysis_fixtures.py`,
//! in `tests/fixtures/race_analysis/`): the six cluster-robust logits on the
//! human data set (read in place from ../shared) and on a scripted sweep,
//! the archetype features and k-means partition on the human data, and the
//! report that opens with humans versus models.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use joule::race::analysis::archetype::{features, Archetypes};
use joule::race::analysis::compare::{model_sample, sample_csv};
use joule::race::analysis::logit::{fit_all, Fit};
use joule::race::analysis::runs::load;
use joule::race::analysis::trajectory::from_runs;
use joule::race::config::ExperimentConfig;
use joule::race::report::write_report_with;
use joule::race::run::{run_experiment, scripted_backend};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn human_csv() -> PathBuf {
    let p = root().join("../shared/data/ai-race/airace_deidentified_long.csv");
    assert!(
        p.exists(),
        "missing {}: tests read ../shared in place",
        p.display()
    );
    p
}

fn fixture(name: &str) -> serde_json::Value {
    let p = root().join("tests/fixtures/race_analysis").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

const TOL: f64 = 1e-6;

fn close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() <= TOL, "{what}: joule {a} vs statsmodels {b}");
}

/// Every term of every specification: coefficient, clustered SE, z, p.
fn compare_fits(fits: &[Result<Fit, String>], expected: &serde_json::Value, what: &str) {
    let exp = expected["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 6);
    for (f, e) in fits.iter().zip(exp) {
        let f = f
            .as_ref()
            .unwrap_or_else(|err| panic!("{what}: not fitted: {err}"));
        let spec = e["specification"].as_str().unwrap();
        assert_eq!(f.specification.to_string(), spec);
        assert_eq!(f.formula, e["formula"].as_str().unwrap(), "{what} {spec}");
        assert_eq!(f.nobs as u64, e["nobs"].as_u64().unwrap());
        assert_eq!(f.n_clusters as u64, e["n_clusters"].as_u64().unwrap());
        close(
            f.log_likelihood,
            e["llf"].as_f64().unwrap(),
            &format!("{what} spec {spec} logL"),
        );
        let terms = e["terms"].as_object().unwrap();
        assert_eq!(
            f.coefs.len(),
            terms.len(),
            "{what} spec {spec}: terms {:?} vs {:?}",
            f.coefs.iter().map(|c| &c.term).collect::<Vec<_>>(),
            terms.keys().collect::<Vec<_>>()
        );
        for (t, v) in terms {
            let c = f
                .get(t)
                .unwrap_or_else(|| panic!("{what} spec {spec}: no term {t}"));
            for (k, x) in [("coef", c.coef), ("se", c.se), ("z", c.z), ("p", c.p)] {
                close(
                    x,
                    v[k].as_f64().unwrap(),
                    &format!("{what} spec {spec} {t} {k}"),
                );
            }
        }
    }
}

#[test]
fn human_logits_match_statsmodels() {
    let rows = joule::race::analysis::human::read(&human_csv()).unwrap();
    assert_eq!(rows.len(), 3245);
    let sample = joule::race::analysis::human::logit_sample(&rows).unwrap();
    let exp = fixture("human_logit.json");
    assert_eq!(sample.len(), 2888);
    assert_eq!(exp["nobs"].as_u64(), Some(2888));
    assert_eq!(exp["n_clusters"].as_u64(), Some(172));
    let fits = fit_all(&sample, &joule::race::analysis::human::controls());
    compare_fits(&fits, &exp, "humans");
}

fn run_fixture_sweep(dir: &Path) -> joule::race::analysis::runs::RunData {
    let cfg = ExperimentConfig::load(&root().join("configs/ai-race/logit-fixture-scripted.toml"))
        .unwrap();
    let mut backend = scripted_backend(cfg.scripted_tokens.clone());
    let s = run_experiment(&cfg, dir, false, &mut backend).unwrap();
    assert_eq!(s.played_races, 48);
    load(&[dir.to_path_buf()]).unwrap()
}

#[test]
fn scripted_sweep_logits_match_statsmodels() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logit-fixture-scripted");
    let data = run_fixture_sweep(&dir);
    let players = from_runs(&data);
    let mut sample = model_sample(&players);
    // The fixture names the run folder as `logit-fixture-scripted`.
    for d in &mut sample.decisions {
        d.cluster = d
            .cluster
            .replacen(&dir.display().to_string(), "logit-fixture-scripted", 1);
    }
    let expected_csv = std::fs::read_to_string(
        root().join("tests/fixtures/race_analysis/scripted_logit_sample.csv"),
    )
    .unwrap();
    assert_eq!(
        sample_csv(&sample),
        expected_csv,
        "the scripted sweep's logit sample changed: rerun the fixture generator (see its docstring)"
    );
    let controls: Vec<String> = sample.controls.iter().map(|c| c.formula()).collect();
    assert_eq!(controls, ["C(model)", "C(persona_condition)"]);
    let exp = fixture("scripted_logit.json");
    assert_eq!(exp["n_clusters"].as_u64(), Some(8));
    compare_fits(
        &fit_all(&sample.decisions, &sample.controls),
        &exp,
        "scripted",
    );
}

#[test]
fn human_archetypes_match_scikit_learn() {
    let rows = joule::race::analysis::human::read(&human_csv()).unwrap();
    let humans = joule::race::analysis::human::player_races(&rows).unwrap();
    let exp = fixture("human_kmeans.json");
    let ids: Vec<&str> = exp["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(humans.len(), 341);
    assert_eq!(
        humans.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
        ids
    );
    // The five raw features, missing where the condition never occurred.
    for (h, e) in humans.iter().zip(exp["raw"].as_array().unwrap()) {
        for (f, (x, y)) in features(h).iter().zip(e.as_array().unwrap()).enumerate() {
            match (x, y.as_f64()) {
                (None, None) => {}
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{} feature {f}", h.key),
                _ => panic!("{} feature {f}: {x:?} vs {y}", h.key),
            }
        }
    }
    let a = Archetypes::fit(&humans).unwrap();
    for f in 0..5 {
        assert!((a.mean[f] - exp["mean"][f].as_f64().unwrap()).abs() < 1e-12);
        assert!((a.std[f] - exp["std"][f].as_f64().unwrap()).abs() < 1e-12);
    }
    // Same partition up to label order.
    let sk: Vec<usize> = exp["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let mut map: BTreeMap<usize, usize> = BTreeMap::new();
    for (&ours, &theirs) in a.human_labels.iter().zip(&sk) {
        let m = *map.entry(ours).or_insert(theirs);
        assert_eq!(
            m, theirs,
            "cluster {ours} maps to two scikit-learn clusters"
        );
    }
    assert_eq!(map.len(), 4);
    let mut image: Vec<usize> = map.values().copied().collect();
    image.sort();
    assert_eq!(image, [0, 1, 2, 3], "not a one-to-one relabelling");
    for (ours, theirs) in &map {
        let c = &exp["centroids"][*theirs];
        for f in 0..5 {
            let (x, y) = (a.centroids[*ours][f], c[f].as_f64().unwrap());
            assert!(
                (x - y).abs() < TOL,
                "centroid {ours} feature {f}: {x} vs {y}"
            );
        }
    }
    assert!((a.inertia - exp["inertia"].as_f64().unwrap()).abs() < TOL);
    let mut sizes = a.sizes.clone();
    sizes.sort();
    assert_eq!(sizes, [19, 19, 133, 170]);
    // Named from their centroids.
    let mut names = a.names.clone();
    names.sort();
    assert_eq!(
        names,
        [
            "Aggressive starter / reciprocator",
            "Cautious starter",
            "Persister",
            "Reciprocal catch-up"
        ]
    );
    let cautious = a
        .names
        .iter()
        .position(|n| n == "Cautious starter")
        .unwrap();
    assert_eq!(a.sizes[cautious], 133);
    // A human assigned to the nearest centroid gets its own cluster back.
    for (h, &l) in humans.iter().zip(&a.human_labels) {
        assert_eq!(a.assign(h), l, "{}", h.key);
    }
}

#[test]
fn report_with_human_data_opens_with_humans_versus_models() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run_fixture_sweep(&dir);
    let out = tmp.path().join("report");
    let md = write_report_with(&[dir.clone()], &out, Some(&human_csv())).unwrap();
    let first_section = md.find("\n## ").map(|i| &md[i + 1..]).unwrap();
    // Humans versus models first (rates, archetypes and their plot, strategy
    // mix, the logits), then the contract table and the run's own tables.
    let order = [
        "## Humans versus models",
        "### Unsafe rate by p_max",
        "### Unsafe rate by position",
        "### Archetype shares",
        "![archetypes](archetypes.png)",
        "### Strategy mix",
        "## Cluster-robust logits of Unsafe",
        "## Output contract per model",
        "## Unsafe rate by p_max",
    ];
    let mut at = 0;
    for h in order {
        let i = md[at..]
            .find(h)
            .unwrap_or_else(|| panic!("`{h}` missing or out of order"));
        at += i + h.len();
    }
    assert!(first_section.starts_with("## Humans versus models"));
    assert!(md.contains("| Humans |") || md.contains(" Humans |"));
    assert!(md.contains("`scripted:random`") && md.contains("`scripted:CS`"));
    // Human p_max rows: 883 / 1010 / 1352 participant-rounds.
    assert!(md.contains("n=883") && md.contains("n=1010") && md.contains("n=1352"));
    // Each model's Unsafe rate tested against the humans' (src/race/unsafe_rates.rs).
    assert!(md.contains("### Unsafe rates against the humans' (two-proportion tests)"));
    let tests_csv = std::fs::read_to_string(out.join("unsafe_tests.csv")).unwrap();
    assert!(
        tests_csv
            .lines()
            .any(|l| l.starts_with("all,all,scripted:random,")),
        "{tests_csv}"
    );
    // The archetype plot decodes and is not blank.
    let img = image::open(out.join("archetypes.png")).unwrap().to_rgb8();
    assert!(img.width() > 300);
    let colored = img.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(colored > 5000, "plot nearly empty: {colored} pixels");
    let logit = std::fs::read_to_string(out.join("logit.csv")).unwrap();
    assert!(logit
        .lines()
        .any(|l| l.starts_with("models,6,\"own_prev_unsafe\"")));
    assert!(logit
        .lines()
        .any(|l| l.starts_with("humans,6,\"C(sex)[T.Male]\"")));
    let strategies = std::fs::read_to_string(out.join("strategies.csv")).unwrap();
    assert_eq!(strategies.lines().count(), 1 + 341 + 96);
    // Without the human data the report still fits the model logits.
    let out2 = tmp.path().join("report2");
    let md2 = write_report_with(&[dir], &out2, None).unwrap();
    assert!(!md2.contains("## Humans versus models"));
    assert!(md2.contains("## Cluster-robust logits of Unsafe"));
    assert!(!out2.join("archetypes.png").exists());
}
