//! The human experiment's de-identified data set (spec §8; the
//! `public_dataset/airace_deidentified_long.csv` of the race's public
//! repository: one row per participant-round, 3,245 rows, 341 participants,
//! 173 pairs). Reads and checks the file (errors name the file, the line and
//! the column), turns each participant into a [`PlayerRace`], and builds the
//! paper's Table 1 analysed sample: rounds ≥ 2, `CONSENT_REVOKED` sex and
//! `DATA_EXPIRED`/`CONSENT_REVOKED` nationality dropped, the progress gap
//! and age (bin midpoints) centred on the sample means, clustered on the
//! pair, with the controls `C(sex) + age_c + C(nationality_group) +
//! risk_gamble_choice` (2,888 decisions, 172 pairs).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use super::logit::{Control, Decision};
use super::trajectory::{PlayerRace, RoundObs};

/// One participant-round (the file's columns, §8).
#[derive(Debug, Clone)]
pub struct HumanRow {
    pub participant_id: String,
    pub group_id: String,
    pub round_number: u32,
    pub max_private_risk: f64,
    pub decision: f64,
    pub decision_opponent: f64,
    pub decision_lag: i32,
    pub decision_opponent_lag: i32,
    pub delta_steps_lag: f64,
    pub sex: String,
    pub age: String,
    pub nationality_group: String,
    pub risk_gamble_choice: f64,
}

/// Where users get the file.
pub const SOURCE_HINT: &str = "the `public_dataset/airace_deidentified_long.csv` file of the race's public repository (trungkiet2005/AI_Race_Experiment)";

/// The columns read (the file has more: acc_steps…, won_race, num_rounds).
const COLUMNS: [&str; 13] = [
    "participant_id",
    "group_id",
    "round_number",
    "max_private_risk",
    "decision",
    "decision_opponent",
    "decision_lag",
    "decision_opponent_lag",
    "delta_steps_lag",
    "sex",
    "age",
    "nationality_group",
    "risk_gamble_choice",
];

/// Split one CSV line into fields (RFC 4180 quotes, `""` inside quotes).
fn split_csv(line: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => cur.push(c),
            (false, '"') if cur.is_empty() => quoted = true,
            (false, ',') => out.push(std::mem::take(&mut cur)),
            (false, c) => cur.push(c),
        }
    }
    anyhow::ensure!(!quoted, "unterminated quoted field");
    out.push(cur);
    Ok(out)
}

fn binary(v: f64, what: &str) -> anyhow::Result<bool> {
    if v == 0.0 {
        Ok(false)
    } else if v == 1.0 {
        Ok(true)
    } else {
        anyhow::bail!("`{what}` must be 0 or 1, got {v}")
    }
}

/// Read and check the data set.
pub fn read(path: &Path) -> anyhow::Result<Vec<HumanRow>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading the human data set {} (get it from {SOURCE_HINT})",
            path.display()
        )
    })?;
    let mut lines = text.lines().enumerate();
    let (_, head) = lines
        .next()
        .ok_or_else(|| anyhow::anyhow!("{} is empty", path.display()))?;
    let head = split_csv(head.trim_start_matches('\u{feff}'))
        .with_context(|| format!("{} line 1", path.display()))?;
    let mut idx = [0usize; 13];
    for (i, c) in COLUMNS.iter().enumerate() {
        idx[i] = head.iter().position(|h| h.trim() == *c).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no column `{c}` in the header (expected the columns of spec §8: {})",
                path.display(),
                COLUMNS.join(", ")
            )
        })?;
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let lineno = i + 1;
        let row = (|| -> anyhow::Result<HumanRow> {
            let f = split_csv(line)?;
            anyhow::ensure!(
                f.len() == head.len(),
                "{} fields, the header has {}",
                f.len(),
                head.len()
            );
            let get = |c: usize| f[idx[c]].trim();
            let num = |c: usize| -> anyhow::Result<f64> {
                let v: f64 = get(c).parse().map_err(|_| {
                    anyhow::anyhow!(
                        "column `{}`: expected a number, got `{}`",
                        COLUMNS[c],
                        get(c)
                    )
                })?;
                anyhow::ensure!(v.is_finite(), "column `{}`: {v} is not finite", COLUMNS[c]);
                Ok(v)
            };
            let int = |c: usize| -> anyhow::Result<i64> {
                let v = num(c)?;
                anyhow::ensure!(
                    v.fract() == 0.0,
                    "column `{}`: expected a whole number, got {v}",
                    COLUMNS[c]
                );
                Ok(v as i64)
            };
            let r = HumanRow {
                participant_id: get(0).to_string(),
                group_id: get(1).to_string(),
                round_number: u32::try_from(int(2)?)
                    .map_err(|_| anyhow::anyhow!("column `round_number`: negative"))?,
                max_private_risk: num(3)?,
                decision: num(4)?,
                decision_opponent: num(5)?,
                decision_lag: int(6)? as i32,
                decision_opponent_lag: int(7)? as i32,
                delta_steps_lag: num(8)?,
                sex: get(9).to_string(),
                age: get(10).to_string(),
                nationality_group: get(11).to_string(),
                risk_gamble_choice: num(12)?,
            };
            anyhow::ensure!(
                !r.participant_id.is_empty() && !r.group_id.is_empty(),
                "empty participant_id or group_id"
            );
            binary(r.decision, "decision")?;
            binary(r.decision_opponent, "decision_opponent")?;
            anyhow::ensure!(r.round_number >= 1, "`round_number` must be at least 1");
            for (v, w) in [
                (r.decision_lag, "decision_lag"),
                (r.decision_opponent_lag, "decision_opponent_lag"),
            ] {
                let ok = if r.round_number == 1 {
                    v == -1
                } else {
                    v == 0 || v == 1
                };
                anyhow::ensure!(
                    ok,
                    "`{w}` must be -1 in round 1 and 0/1 later, got {v} in round {}",
                    r.round_number
                );
            }
            Ok(r)
        })()
        .with_context(|| format!("{} line {lineno}", path.display()))?;
        rows.push(row);
    }
    anyhow::ensure!(!rows.is_empty(), "{} has no rows", path.display());
    Ok(rows)
}

/// Each participant's rows, in round order, checked to start at round 1
/// and have no gaps.
fn by_participant(rows: &[HumanRow]) -> anyhow::Result<BTreeMap<&str, Vec<&HumanRow>>> {
    let mut by: BTreeMap<&str, Vec<&HumanRow>> = BTreeMap::new();
    for r in rows {
        by.entry(r.participant_id.as_str()).or_default().push(r);
    }
    for (p, rs) in by.iter_mut() {
        rs.sort_by_key(|r| r.round_number);
        for (i, r) in rs.iter().enumerate() {
            anyhow::ensure!(
                r.round_number as usize == i + 1,
                "participant {p}: rounds are not 1, 2, … (found round {} at position {})",
                r.round_number,
                i + 1
            );
        }
    }
    Ok(by)
}

/// Every participant as a player-race (the pair is the cluster).
pub fn player_races(rows: &[HumanRow]) -> anyhow::Result<Vec<PlayerRace>> {
    let by = by_participant(rows)?;
    Ok(by
        .into_iter()
        .map(|(p, rs)| PlayerRace {
            key: p.to_string(),
            group: "human".into(),
            p_max: rs[0].max_private_risk,
            n_players: 2,
            cluster: rs[0].group_id.clone(),
            included: true,
            categorical: BTreeMap::new(),
            numeric: BTreeMap::new(),
            rounds: rs
                .iter()
                .map(|r| RoundObs {
                    round: r.round_number,
                    unsafe_: r.decision == 1.0,
                    others: vec![r.decision_opponent == 1.0],
                    gap_before: r.delta_steps_lag,
                })
                .collect(),
        })
        .collect())
}

/// Age bin → midpoint (the reference's mapping).
pub fn age_midpoint(bin: &str) -> Option<f64> {
    let (a, b) = bin.split_once('-')?;
    let (a, b): (f64, f64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    Some((a + b) / 2.0)
}

/// The human controls of the paper's Table 1.
pub fn controls() -> Vec<Control> {
    vec![
        Control::Categorical("sex".into()),
        Control::Numeric("age_c".into()),
        Control::Categorical("nationality_group".into()),
        Control::Numeric("risk_gamble_choice".into()),
    ]
}

/// The analysed sample of the paper's Table 1 (see the module comment).
pub fn logit_sample(rows: &[HumanRow]) -> anyhow::Result<Vec<Decision>> {
    let by = by_participant(rows)?;
    let first: BTreeMap<&str, bool> = by
        .iter()
        .map(|(p, rs)| (*p, rs[0].decision == 1.0))
        .collect();
    let kept: Vec<(&HumanRow, f64)> = rows
        .iter()
        .filter(|r| r.round_number > 1)
        .filter(|r| r.sex != "CONSENT_REVOKED")
        .filter(|r| !["DATA_EXPIRED", "CONSENT_REVOKED"].contains(&r.nationality_group.as_str()))
        .filter_map(|r| age_midpoint(&r.age).map(|a| (r, a)))
        .collect();
    anyhow::ensure!(!kept.is_empty(), "the human analysed sample is empty");
    let n = kept.len() as f64;
    let gap_mean = kept.iter().map(|(r, _)| r.delta_steps_lag).sum::<f64>() / n;
    let age_mean = kept.iter().map(|(_, a)| a).sum::<f64>() / n;
    Ok(kept
        .into_iter()
        .map(|(r, age)| Decision {
            unsafe_: r.decision == 1.0,
            p_max: r.max_private_risk,
            own_prev_unsafe: r.decision_lag == 1,
            opponent_prev_unsafe: r.decision_opponent_lag == 1,
            progress_gap_before: r.delta_steps_lag - gap_mean,
            first_round_unsafe: first[r.participant_id.as_str()],
            cluster: r.group_id.clone(),
            categorical: [
                ("sex".to_string(), r.sex.clone()),
                ("nationality_group".to_string(), r.nationality_group.clone()),
            ]
            .into_iter()
            .collect(),
            numeric: [
                ("age_c".to_string(), age - age_mean),
                ("risk_gamble_choice".to_string(), r.risk_gamble_choice),
            ]
            .into_iter()
            .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const HEAD_FOR_FUZZ: &str = HEAD;
    const HEAD: &str = "participant_id,group_id,round_number,max_private_risk,decision,decision_opponent,decision_lag,decision_opponent_lag,acc_steps,acc_steps_opponent,acc_steps_lag,acc_steps_opponent_lag,delta_steps_lag,won_race,num_rounds,sex,age,nationality_group,risk_gamble_choice";

    fn write(body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.csv");
        std::fs::write(&p, format!("{HEAD}\n{body}")).unwrap();
        (d, p)
    }

    #[test]
    fn bad_rows_name_the_file_line_and_column() {
        let ok = "P1,G1,1,0.1,0,1,-1,-1,1,1.5,0,0,0,0,5,Male,18-22,Other,2\n\
                  P1,G1,2,0.1,1,1,0,1,2.5,3,1,1.5,-0.5,0,5,Male,18-22,Other,2\n";
        let (_d, p) = write(ok);
        let rows = read(&p).unwrap();
        assert_eq!(rows.len(), 2);
        let pr = player_races(&rows).unwrap();
        assert_eq!(pr[0].rounds[1].gap_before, -0.5);
        assert_eq!(pr[0].rounds[0].others, [true]);
        for (body, want) in [
            (
                "P1,G1,1,0.1,2,1,-1,-1,1,1,0,0,0,0,5,Male,18-22,Other,2\n",
                "line 2",
            ),
            (
                "P1,G1,1,0.1,x,1,-1,-1,1,1,0,0,0,0,5,Male,18-22,Other,2\n",
                "column `decision`",
            ),
            (
                "P1,G1,2,0.1,0,1,-1,-1,1,1,0,0,0,0,5,Male,18-22,Other,2\n",
                "decision_lag",
            ),
            ("P1,G1,1,0.1,0,1\n", "fields"),
            (
                "P1,\"G1,1,0.1,0,1,-1,-1,1,1,0,0,0,0,5,Male,18-22,Other,2\n",
                "unterminated",
            ),
        ] {
            let (_d, p) = write(body);
            let e = format!("{:#}", read(&p).unwrap_err());
            assert!(e.contains("h.csv") && e.contains(want), "{want}: {e}");
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.csv");
        std::fs::write(&p, "participant_id,round_number\nP1,1\n").unwrap();
        let e = format!("{:#}", read(&p).unwrap_err());
        assert!(e.contains("no column `group_id`"), "{e}");
        // A participant whose rounds skip one.
        let (_d, p) = write(
            "P1,G1,1,0.1,0,1,-1,-1,1,1,0,0,0,0,5,Male,18-22,Other,2\n\
             P1,G1,3,0.1,0,1,0,1,1,1,0,0,0,0,5,Male,18-22,Other,2\n",
        );
        let e = player_races(&read(&p).unwrap()).unwrap_err().to_string();
        assert!(e.contains("participant P1"), "{e}");
        assert_eq!(age_midpoint("23-27"), Some(25.0));
        assert_eq!(age_midpoint("CONSENT_REVOKED"), None);
    }
}

#[cfg(test)]
mod fuzz {
    use rand::{Rng, SeedableRng};

    /// Seeded byte and line mutations of a valid file never panic the reader
    /// or the sample builders; each either reads or gives an error.
    #[test]
    fn mutated_files_give_rows_or_errors() {
        let good = format!(
            "{}\nP1,G1,1,0.9,0,0,-1,-1,1,1,0,0,0,0,5,Male,28-32,Other,1\nP1,G1,2,0.9,1,0,0,0,2.5,2,1,1,0,0,5,Male,28-32,Other,1\nP2,G1,1,0.9,0,0,-1,-1,1,1,0,0,0,0,5,Female,18-22,Poland,3\nP2,G1,2,0.9,0,1,0,0,2,2.5,1,1,0,0,5,Female,18-22,Poland,3\n",
            super::tests::HEAD_FOR_FUZZ
        );
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.csv");
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(15);
        let tokens = [
            "", ",", "\"", "-1", "nan", "inf", "1e309", "2", "\u{feff}", "\n", "x",
        ];
        for _ in 0..400 {
            let mut b = good.clone().into_bytes();
            match r.gen_range(0..3) {
                0 => {
                    let i = r.gen_range(0..b.len());
                    b.truncate(i);
                }
                1 => {
                    let i = r.gen_range(0..b.len());
                    b[i] = r.gen();
                }
                _ => {
                    let i = r.gen_range(0..b.len());
                    let t = tokens[r.gen_range(0..tokens.len())].as_bytes();
                    b.splice(i..(i + 1).min(b.len()), t.iter().copied());
                }
            }
            std::fs::write(&p, &b).unwrap();
            if let Ok(rows) = super::read(&p) {
                let _ = super::player_races(&rows);
                let _ = super::logit_sample(&rows);
            }
        }
    }
}
