//! `joule report` against the reference's own aggregates (../shared, read in place).
//!
//! Every aggregate CSV must equal the reference's byte for byte. Two files cannot:
//! `runs.csv` and `recommendations_raw.csv` hold a `run_dir` column with the path
//! the reference was analysed from (a Windows folder on the author's machine).
//! For those two, every other field must be byte-identical and `run_dir` must name
//! the same `<condition>/exponent_0.5/run_<k>` folder.

use std::path::{Path, PathBuf};

use joule::report;

const CONDITIONS: [&str; 2] = ["comp_with_discussion", "coop"];

fn condition_dir(cond: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5")
}

fn analyse(cond: &str) -> report::ConditionReport {
    let mut conds = report::load::discover(&[condition_dir(cond)]).expect("reading shared runs");
    assert_eq!(conds.len(), 1, "one condition under {cond}");
    let c = conds.remove(0);
    assert_eq!(c.runs.len(), 5);
    report::analyse(c)
}

/// Split a CSV line on commas (the files compared here hold no quoted fields).
fn fields(line: &str) -> Vec<&str> {
    line.split(',').collect()
}

#[test]
fn aggregate_csvs_match_the_reference_byte_for_byte() {
    for cond in CONDITIONS {
        let r = analyse(cond);
        let ref_dir = condition_dir(cond).join("aggregate");
        assert_eq!(r.tables.len(), 22);
        for (name, table) in &r.tables {
            let ours = table.to_csv();
            let path = ref_dir.join(format!("{name}.csv"));
            let theirs = std::fs::read_to_string(&path).expect("reference CSV");
            if *name == "runs" || *name == "recommendations_raw" {
                // Value for value except run_dir (see the file comment).
                let (ol, tl): (Vec<&str>, Vec<&str>) =
                    (ours.lines().collect(), theirs.lines().collect());
                assert_eq!(ol.len(), tl.len(), "{cond}/{name}: row count");
                assert_eq!(ol[0], tl[0], "{cond}/{name}: header");
                let rd = fields(tl[0]).iter().position(|c| *c == "run_dir").unwrap();
                let ri = fields(tl[0]).iter().position(|c| *c == "run_id").unwrap();
                for (i, (o, t)) in ol.iter().zip(&tl).enumerate().skip(1) {
                    let (mut fo, mut ft) = (fields(o), fields(t));
                    let want_tail = format!("{cond}/exponent_0.5/{}", ft[ri]);
                    assert!(
                        fo[rd].replace('\\', "/").ends_with(&want_tail),
                        "{cond}/{name} row {i}: {}",
                        fo[rd]
                    );
                    assert!(
                        ft[rd].replace('\\', "/").ends_with(&want_tail),
                        "{cond}/{name} row {i}: {}",
                        ft[rd]
                    );
                    fo.remove(rd);
                    ft.remove(rd);
                    assert_eq!(fo, ft, "{cond}/{name} row {i}");
                }
            } else {
                assert_eq!(ours, theirs, "{cond}/{name}.csv differs from the reference");
            }
        }
    }
}

#[test]
fn spec_section_9_numbers() {
    let r = analyse("comp_with_discussion");
    let t = |n: &str| &r.tables.iter().find(|(name, _)| *name == n).unwrap().1;
    let k4 = [("agent_id", "agent_4"), ("model_name", "qwen3:8b")];
    let ra = t("rounds_active");
    assert_eq!(
        report::summary::lookup(ra, &k4, "avg_rounds_active"),
        Some(14.0)
    );
    assert_eq!(
        report::summary::lookup(ra, &k4, "std_rounds_active"),
        Some(9.460443964212251)
    );
    let k1 = [("agent_id", "agent_1"), ("model_name", "gemma4:e4b")];
    let g = t("energy_gained_per_spent");
    assert_eq!(
        report::summary::lookup(g, &k1, "avg_gained_per_spent"),
        Some(1.3894827112824493)
    );
    assert_eq!(
        report::summary::lookup(g, &k1, "std_gained_per_spent"),
        Some(0.4304367687405563)
    );
    assert_eq!(
        report::summary::lookup(g, &k1, "avg_energy_spent"),
        Some(3805.8839999999996)
    );
    let c = t("average_collisions");
    let kc = [("metric", "total_collisions")];
    assert_eq!(report::summary::lookup(c, &kc, "mean"), Some(12.8));
    assert_eq!(
        report::summary::lookup(c, &kc, "std"),
        Some(3.8987177379235853)
    );
    let per_run: Vec<i64> =
        report::metrics::jobs::collisions_per_run(&r.rows.memory, report::Mode::Faithful)
            .into_iter()
            .map(|(_, c)| c.unwrap_or(0))
            .collect();
    assert_eq!(per_run, vec![19, 11, 11, 9, 14]);
}
