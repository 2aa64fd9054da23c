//! Replays the ten shared reference runs (comp_with_discussion and coop,
//! exponent 0.5, run_1..5) through the faithful engine: every recorded value
//! must be reproduced.

use std::path::Path;

use joule::energy_society::replay::replay_run;

fn replay_condition(cond: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5");
    assert!(
        root.exists(),
        "missing {}: tests read ../shared in place",
        root.display()
    );
    for k in 1..=5 {
        let dir = root.join(format!("run_{k}"));
        let r = replay_run(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        let shown: Vec<String> = r
            .mismatches
            .iter()
            .take(20)
            .map(|m| m.to_string())
            .collect();
        assert!(
            r.mismatches.is_empty(),
            "{}: {} mismatches, first:\n{}",
            r.run,
            r.mismatches.len(),
            shown.join("\n")
        );
        assert!(
            r.values_checked > 1000,
            "{}: only {} values checked",
            r.run,
            r.values_checked
        );
        // Most phase charges are the cost formula on one call (spec §2).
        let c = &r.charges;
        assert!(c.single_call > 10 * c.split_calls, "{}: {c:?}", r.run);
    }
}

#[test]
fn replays_comp_with_discussion_runs() {
    replay_condition("comp_with_discussion");
}

#[test]
fn replays_coop_runs() {
    replay_condition("coop");
}
