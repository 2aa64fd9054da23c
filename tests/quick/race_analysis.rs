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

// ---------- report.md's tables and the CSVs behind them ----------

/// The cells of a Markdown table row: split at `|` outside code spans (and
/// not escaped), the outer pipes dropped.
fn md_cells(line: &str) -> Vec<String> {
    let inner = line.trim();
    let inner = inner.strip_prefix('|').unwrap_or(inner);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let (mut code, mut esc) = (false, false);
    for ch in inner.chars() {
        match ch {
            '`' if !esc => {
                code = !code;
                cells.last_mut().unwrap().push(ch);
            }
            '|' if !code && !esc => cells.push(String::new()),
            _ => cells.last_mut().unwrap().push(ch),
        }
        esc = ch == '\\' && !esc;
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// Every Markdown table of `md`: its lines (header, separator, rows).
fn md_tables(md: &str) -> Vec<Vec<&str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    for l in md.lines() {
        if l.trim_start().starts_with('|') {
            cur.push(l);
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The numbers written in `text` (code spans dropped): each value with its
/// number of decimals. A number right after a letter, `_` or `.` is part of
/// a name; one after `<` is a bound (`<0.0001`), not a value.
fn numbers(text: &str) -> Vec<(f64, usize)> {
    let mut plain = String::new();
    let mut code = false;
    for ch in text.chars() {
        if ch == '`' {
            code = !code;
            plain.push(' ');
        } else if !code {
            plain.push(ch);
        }
    }
    let b: Vec<char> = plain.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let signed = (b[i] == '-' || b[i] == '+') && i + 1 < b.len() && b[i + 1].is_ascii_digit();
        if b[i].is_ascii_digit() || signed {
            let prev = if start > 0 { Some(b[start - 1]) } else { None };
            let mut j = if signed { i + 1 } else { i };
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let mut decimals = 0;
            if j + 1 < b.len() && b[j] == '.' && b[j + 1].is_ascii_digit() {
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                    decimals += 1;
                }
            }
            let name_part = prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.');
            let bound = b[..start].iter().rev().find(|c| **c != ' ') == Some(&'<');
            if !name_part && !bound {
                let s: String = b[start..j].iter().collect();
                out.push((s.parse::<f64>().unwrap(), decimals));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The fields of one CSV line (quotes honoured).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// Every row of the report's summary CSVs (not the per-decision or
/// per-player files) as its numbers, with the file it came from.
fn csv_rows(out: &Path) -> Vec<(String, Vec<f64>)> {
    let per_item = [
        "logit_sample.csv",
        "trajectories.csv",
        "archetypes.csv",
        "strategies.csv",
    ];
    let mut rows = Vec::new();
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".csv") || per_item.contains(&name.as_str()) {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap().lines().skip(1) {
            let mut v = Vec::new();
            for f in csv_fields(line) {
                match f.parse::<f64>() {
                    Ok(x) if x.is_finite() => v.push(x),
                    _ => v.extend(numbers(&f).into_iter().map(|(x, _)| x)),
                }
            }
            rows.push((name.clone(), v));
        }
    }
    rows
}

/// `shown` (written with `decimals` decimals) is `v` or `100 v` rounded.
fn shows(shown: f64, decimals: usize, v: f64) -> bool {
    let tol = 0.5 * 10f64.powi(-(decimals as i32)) + 1e-9 * shown.abs().max(1.0);
    [1.0, 100.0].iter().any(|s| (v * s - shown).abs() <= tol)
}

/// Every table of report.md is well formed (header, separator and rows
/// with as many cells), and every number in its cells, its fit summaries
/// (`N=…, clusters=…, logL=…`) and its opening counts is, at the precision
/// shown, in one row of one of the CSVs written beside it.
fn check_report(md: &str, out: &Path) {
    // The closing Provenance section names builds, machines and files (versions and commits
    // are not results; provenance.csv holds them whole), so the check ends before it.
    let md = md.split("\n## Provenance\n").next().unwrap_or(md);
    assert!(
        md.len() > 100,
        "the report before its Provenance section is empty"
    );
    let tables = md_tables(md);
    assert!(tables.len() >= 8, "{} tables", tables.len());
    let rows = csv_rows(out);
    let mut checked = 0;
    let mut missing = Vec::new();
    let mut check = |cell: &str| {
        let ns = numbers(cell);
        if ns.is_empty() {
            return;
        }
        checked += 1;
        let ok = rows.iter().any(|(_, vals)| {
            ns.iter()
                .all(|&(x, d)| vals.iter().any(|&v| shows(x, d, v)))
        });
        if !ok {
            missing.push(cell.to_string());
        }
    };
    for t in &tables {
        assert!(t.len() >= 2, "a table without a separator: {t:?}");
        let n = md_cells(t[0]).len();
        let sep = md_cells(t[1]);
        assert!(
            sep.iter().all(|c| {
                let c = c.trim_matches(':');
                c.len() >= 3 && c.chars().all(|x| x == '-')
            }),
            "not a separator row: {}",
            t[1]
        );
        for l in t {
            assert_eq!(
                md_cells(l).len(),
                n,
                "a row of another width than its header `{}`: `{l}`",
                t[0]
            );
        }
        for l in &t[2..] {
            for c in md_cells(l) {
                check(&c);
            }
        }
    }
    for l in md.lines() {
        if l.starts_with("Models: ") || l.starts_with("Humans: ") {
            check(l);
        }
        if l.chars().next().is_some_and(|c| c.is_ascii_digit()) && l.contains("races") {
            check(l);
        }
    }
    assert!(
        missing.is_empty(),
        "numbers of report.md in no CSV row ({} of {checked} cells): {missing:#?}",
        missing.len()
    );
    assert!(checked > 20, "only {checked} cells checked");
}

#[test]
fn report_tables_are_well_formed_and_the_csvs_hold_every_number() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run_fixture_sweep(&dir);
    let out = tmp.path().join("report");
    let md = write_report_with(&[dir.clone()], &out, Some(&human_csv())).unwrap();
    assert_eq!(md, std::fs::read_to_string(out.join("report.md")).unwrap());
    check_report(&md, &out);
    // The archetypes at full precision: centroids raw and z-scored, the
    // human mean and SD the z-scores use.
    let a = Archetypes::fit(
        &joule::race::analysis::human::player_races(
            &joule::race::analysis::human::read(&human_csv()).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let cent = std::fs::read_to_string(out.join("archetype_centroids.csv")).unwrap();
    let row = |kind: &str, cluster: &str| -> Vec<f64> {
        let l = cent
            .lines()
            .map(csv_fields)
            .find(|f| f[0] == kind && f[1] == cluster)
            .unwrap_or_else(|| panic!("no {kind} row {cluster} in {cent}"));
        l[4..].iter().map(|x| x.parse().unwrap()).collect()
    };
    for j in 0..a.names.len() {
        assert_eq!(row("centroid_raw", &j.to_string()), a.raw_centroids[j]);
        assert_eq!(row("centroid_z", &j.to_string()), a.centroids[j]);
    }
    assert_eq!(row("z_mean", ""), a.mean);
    assert_eq!(row("z_sd", ""), a.std);
    // humans_vs_models.csv: the rates, and now the archetype shares and the
    // strategy mix of every group.
    let hvm = std::fs::read_to_string(out.join("humans_vs_models.csv")).unwrap();
    assert!(hvm.starts_with("table,group,key,count,n,share,ci_low,ci_high\n"));
    for table in ["p_max", "position", "archetype", "strategy"] {
        for g in ["human", "scripted:CS", "scripted:random"] {
            assert!(
                hvm.lines().any(|l| l.starts_with(&format!("{table},{g},"))),
                "no {table} row of {g}"
            );
        }
    }
    let human_strategy: f64 = hvm
        .lines()
        .filter(|l| l.starts_with("strategy,human,"))
        .map(|l| csv_fields(l)[5].parse::<f64>().unwrap())
        .sum();
    assert!((human_strategy - 1.0).abs() < 1e-9, "{human_strategy}");

    // Without the human data: the same checks on what is left.
    let out2 = tmp.path().join("report2");
    let md2 = write_report_with(&[dir], &out2, None).unwrap();
    check_report(&md2, &out2);
}

/// A specification that cannot be fitted (one cluster) says why in the
/// `note` column of logit.csv; `term` stays empty.
#[test]
fn a_failed_fit_gives_its_reason_in_the_note_column() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = tmp.path().join("one-cluster.toml");
    std::fs::write(
        &cfg_path,
        "name = \"one-cluster\"\nrepetitions = 1\np_max = [0.1, 0.6, 0.9]\nn_players = [2]\n\n\
         [[lineups]]\nname = \"CS-CS\"\nseats = [\"scripted:CS\", \"scripted:CS\"]\n",
    )
    .unwrap();
    let cfg = ExperimentConfig::load(&cfg_path).unwrap();
    let dir = tmp.path().join("run");
    let mut backend = scripted_backend(cfg.scripted_tokens.clone());
    run_experiment(&cfg, &dir, false, &mut backend).unwrap();
    let out = tmp.path().join("report");
    let md = write_report_with(&[dir], &out, None).unwrap();
    assert!(md.contains("Models: not fitted: "), "{md}");
    let logit = std::fs::read_to_string(out.join("logit.csv")).unwrap();
    let mut lines = logit.lines();
    let head = csv_fields(lines.next().unwrap());
    assert_eq!(
        head,
        [
            "sample",
            "specification",
            "term",
            "coef",
            "se",
            "z",
            "p",
            "nobs",
            "n_clusters",
            "log_likelihood",
            "note"
        ]
    );
    let mut failed = 0;
    for l in lines {
        let f = csv_fields(l);
        assert_eq!(f.len(), head.len(), "{l}");
        if f[10].is_empty() {
            assert!(!f[2].is_empty() && f[3].parse::<f64>().is_ok(), "{l}");
        } else {
            failed += 1;
            assert!(f[10].starts_with("not fitted: "), "{l}");
            assert!(f[2].is_empty(), "the reason is not a term: {l}");
            assert!(f[3..10].iter().all(|x| x.is_empty()), "{l}");
        }
    }
    assert_eq!(failed, 6, "{logit}");
    check_report(&md, &out);
}

/// A folder that is not a race run folder is named with what was expected.
#[test]
fn an_empty_or_other_folder_is_not_a_race_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let society =
        root().join("../shared/data/reference-runs/energy-society/coop/exponent_0.5/run_1");
    for d in [empty.clone(), society, tmp.path().join("absent")] {
        let out = tmp.path().join("out");
        let err = format!(
            "{:#}",
            write_report_with(&[d.clone()], &out, None).unwrap_err()
        );
        assert!(
            err.contains(&d.display().to_string())
                && err.contains("expected a race run folder (with races.jsonl"),
            "{err}"
        );
        assert!(!out.exists(), "{} was written", out.display());
    }
}

/// A bad `--human` file fails before anything reaches `--out`: a new folder
/// is not created, an old report is left as it was, no partial folder stays.
#[test]
fn a_bad_human_file_writes_nothing_to_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run_fixture_sweep(&dir);
    let bad = tmp.path().join("bad.csv");
    std::fs::write(&bad, "participant,round\nP1,one\n").unwrap();
    let reports = tmp.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    let out = reports.join("new");
    let err = write_report_with(&[dir.clone()], &out, Some(&bad)).unwrap_err();
    assert!(format!("{err:#}").contains("bad.csv"), "{err:#}");
    assert!(!out.exists(), "a half-written --out");
    let old = reports.join("old");
    write_report_with(&[dir.clone()], &old, None).unwrap();
    let before: Vec<(String, Vec<u8>)> = {
        let mut v: Vec<_> = std::fs::read_dir(&old)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (p.display().to_string(), std::fs::read(&p).unwrap())
            })
            .collect();
        v.sort();
        v
    };
    assert!(write_report_with(&[dir], &old, Some(&bad)).is_err());
    let mut after: Vec<_> = std::fs::read_dir(&old)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    after.sort();
    assert!(before == after, "--out changed");
    let left: Vec<String> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["old"], "a partial folder stayed beside --out");
}

/// `joule race report --help` says what DIRS and --out are.
#[test]
fn race_report_help_describes_dirs_and_out() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["race", "report", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let para = |key: &str| -> String {
        let at = help
            .find(key)
            .unwrap_or_else(|| panic!("`{key}` not in the help:\n{help}"));
        help[at..].lines().take(4).collect::<Vec<_>>().join(" ")
    };
    let dirs = para("Arguments:\n");
    assert!(
        dirs.contains("<DIRS>") && dirs.contains("races.jsonl"),
        "DIRS: {dirs}"
    );
    let out_arg = para("\n      --out <DIR>\n");
    assert!(out_arg.contains("report is written"), "--out: {out_arg}");
}

/// `race replay` refuses an existing output or an unknown policy before it
/// computes anything, and leaves no folder behind for the unknown policy.
#[test]
fn race_replay_refuses_before_it_computes() {
    let t = tempfile::tempdir().unwrap();
    let joule = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = t.path().join("k1");
    let out_s = out.to_str().unwrap();
    let first = joule(&["race", "replay", "--k", "1", "--out", out_s]);
    assert!(first.status.success(), "{first:?}");
    let kept = std::fs::read(out.join("replay.jsonl")).unwrap();
    let again = joule(&["race", "replay", "--k", "1", "--out", out_s]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{err}");
    assert!(err.contains("replay.jsonl exists"), "{err}");
    assert_eq!(std::fs::read(out.join("replay.jsonl")).unwrap(), kept);
    let other = t.path().join("k2");
    let bad = joule(&[
        "race",
        "replay",
        "--model",
        "scripted:nope",
        "--out",
        other.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`--model`") && err.contains("unknown scripted policy `nope`"),
        "{err}"
    );
    assert!(!other.exists());
}
