//! Running race experiments: every pending race of a config
//! is spawned on one [`Driver`], so all unfinished races advance one round
//! per batch (lockstep, §3.3). Outputs in the run folder: `config.json`
//! (with a race of model-backed seats, the kernels of their models under
//! `kernels`),
//! `turns.jsonl` (one TurnRecord per seat per round), `races.jsonl` (one
//! record per race), and after the run `races.csv`, `players.csv` and
//! `run_manifest.json`. A sweep is resumable: races already in
//! `races.jsonl` with all their turns are skipped (each record checked
//! first), a torn last race is cut off, and races whose turns were lost are
//! dropped with the turns of unfinished races and played again. A folder
//! that is not empty (its own `*.tmp` leftovers aside) is taken only when
//! its `config.json` holds this same config.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::rc::Rc;

use anyhow::Context;
use serde::Serialize;

use super::agents::register_race_policies;
use super::config::ExperimentConfig;
use super::scenario::{play_race, RaceRecord, RaceSink, TurnRecord};
use crate::agency::Driver;
use crate::backend::Backend;
use crate::backend::SCRIPTED_PREFIX;
use crate::csv::CsvText;
use crate::record::{read_jsonl, write_json_atomic, EventLog};
use crate::scripted::{ScriptedBackend, TokenDist};

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub total_races: usize,
    pub skipped_races: usize,
    pub played_races: usize,
    pub contaminated_races: usize,
    pub batches: usize,
    pub largest_batch: usize,
}

/// A backend for the config's models: scripted policies for `scripted:<policy>`
/// seats and, when a lineup names a model, the `[llm]` backend (local models on
/// candle, or a model server that serves each seat's model key under that name,
/// or under `llm.model`).
pub fn backend_for(cfg: &ExperimentConfig) -> anyhow::Result<Box<dyn Backend>> {
    let models: BTreeSet<&str> = cfg
        .lineups
        .iter()
        .flat_map(|l| l.seats.iter().map(|s| s.as_str()))
        .collect();
    backend_for_models(
        &cfg.llm,
        &models.into_iter().collect::<Vec<_>>(),
        cfg.scripted_tokens.clone(),
    )
}

/// A backend serving these model keys: scripted ones on the scripted
/// backend, the rest on the `[llm]` backend (see [`backend_for`]).
pub fn backend_for_models(
    llm: &crate::llm::LlmConfig,
    models: &[&str],
    tokens: Option<TokenDist>,
) -> anyhow::Result<Box<dyn Backend>> {
    let scripted = scripted_backend(tokens);
    if models.iter().all(|m| m.starts_with(SCRIPTED_PREFIX)) {
        return Ok(Box::new(scripted));
    }
    let mut names = crate::served::config::ServedNames::default();
    names.add(
        llm.model.as_deref(),
        models.iter().map(|m| (format!("model `{m}`"), *m, *m)),
    )?;
    crate::llm::build_backend(llm, scripted, names)
}

/// The scripted backend with every race policy registered.
pub fn scripted_backend(tokens: Option<TokenDist>) -> ScriptedBackend {
    let mut b = ScriptedBackend::new(tokens.unwrap_or(TokenDist::Uniform { min: 3, max: 6 }));
    register_race_policies(&mut b);
    b
}

/// The key of `config.json` that holds the kernel record of a race with
/// model-backed seats (`inference::engine::kernel_record`).
pub const KERNELS_KEY: &str = "kernels";

/// The kernels `backend` computes the model-backed seats of `cfg` with, or
/// `None` when every seat is scripted.
pub fn race_kernels(
    cfg: &ExperimentConfig,
    backend: &dyn Backend,
) -> Option<crate::backend::KernelRecord> {
    let models: BTreeSet<&str> = cfg
        .lineups
        .iter()
        .flat_map(|l| l.seats.iter().map(|s| s.as_str()))
        .filter(|m| !m.starts_with(SCRIPTED_PREFIX))
        .collect();
    if models.is_empty() {
        return None;
    }
    backend.kernels(&models.into_iter().collect::<Vec<_>>())
}

/// Every race record of a `races.jsonl` (a torn last line left out), each
/// checked ([`RaceRecord::check`]); an error names the file, the record and
/// its game, and the field. A game id recorded twice is refused (counted
/// twice, it would weigh that race double in every report).
pub fn read_races(path: &Path) -> anyhow::Result<Vec<RaceRecord>> {
    let races: Vec<RaceRecord> = read_checked(path, RaceRecord::check)?;
    let mut first = std::collections::HashMap::new();
    for (i, r) in races.iter().enumerate() {
        if let Some(j) = first.insert(r.game_id.as_str(), i) {
            anyhow::bail!(
                "{}: record {} (game `{}`): the game is recorded twice (first as record {}); \
                 each race must be recorded once",
                path.display(),
                i + 1,
                r.game_id,
                j + 1
            );
        }
    }
    Ok(races)
}

/// Every turn record of a `turns.jsonl`, each checked
/// ([`TurnRecord::check`]); errors as [`read_races`].
pub fn read_turns(path: &Path) -> anyhow::Result<Vec<TurnRecord>> {
    read_checked(path, TurnRecord::check)
}

/// The records of the JSONL file `path` as `T`, each passed through `check`;
/// an error names the file, the record and its game.
fn read_checked<T: serde::de::DeserializeOwned>(
    path: &Path,
    check: impl Fn(&T) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<T>> {
    read_jsonl(path)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let game = v.get("game_id").and_then(|g| g.as_str()).unwrap_or("?");
            let at = format!("{}: record {} (game `{game}`)", path.display(), i + 1);
            let r: T = serde_json::from_value(v).with_context(|| at.clone())?;
            check(&r).with_context(|| at)?;
            Ok(r)
        })
        .collect()
}

/// The race records of `dir`'s `races.jsonl`, each checked ([`read_races`]);
/// none when the file is missing.
fn recorded_races(dir: &Path) -> anyhow::Result<Vec<RaceRecord>> {
    let path = dir.join("races.jsonl");
    if !path.exists() {
        return Ok(Vec::new());
    }
    read_races(&path)
}

/// How many records `turns.jsonl` of `dir` holds for each game (a torn last
/// line left out); empty when the file is missing.
fn turn_counts(dir: &Path) -> anyhow::Result<HashMap<String, usize>> {
    let path = dir.join("turns.jsonl");
    let mut counts = HashMap::new();
    if !path.exists() {
        return Ok(counts);
    }
    for v in read_jsonl(&path)? {
        if let Some(g) = v.get("game_id").and_then(|g| g.as_str()) {
            *counts.entry(g.to_string()).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// The first of `races` whose turns in `counts` are not all there (a race
/// has [`RaceRecord::turns`] of them): its game id, the turns it should have
/// and the turns found.
pub fn race_missing_turns<'a>(
    races: impl IntoIterator<Item = &'a RaceRecord>,
    counts: &HashMap<String, usize>,
) -> Option<(&'a str, usize, usize)> {
    races.into_iter().find_map(|r| {
        let found = counts.get(&r.game_id).copied().unwrap_or(0);
        (found != r.turns()).then_some((r.game_id.as_str(), r.turns(), found))
    })
}

/// Ids of races finished in `dir` with all their turns: recorded in
/// `races.jsonl` (each record checked, [`read_races`]) and with
/// [`RaceRecord::turns`] records in `turns.jsonl`. A race whose turns were
/// lost (a file cut short) is not finished: a resume plays it again.
pub fn completed_games(dir: &Path) -> anyhow::Result<BTreeSet<String>> {
    Ok(whole_games(&recorded_races(dir)?, &turn_counts(dir)?))
}

/// The ids of `races` with all their turns in `counts`.
fn whole_games(races: &[RaceRecord], counts: &HashMap<String, usize>) -> BTreeSet<String> {
    races
        .iter()
        .filter(|r| counts.get(&r.game_id) == Some(&r.turns()))
        .map(|r| r.game_id.clone())
        .collect()
}

/// Keep only the records of the games `done` in the JSONL file `name` of
/// `dir`, rewritten through a temporary file (drops a torn line, and the
/// records of a partial race).
fn keep_games(dir: &Path, name: &str, done: &BTreeSet<String>) -> anyhow::Result<()> {
    let path = dir.join(name);
    if !path.exists() {
        return Ok(());
    }
    let kept: Vec<String> = read_jsonl(&path)?
        .into_iter()
        .filter(|v| {
            v.get("game_id")
                .and_then(|g| g.as_str())
                .is_some_and(|g| done.contains(g))
        })
        .map(|v| serde_json::to_string(&v))
        .collect::<Result<_, _>>()?;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut text = kept.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

/// The files a race run writes through a temporary file
/// ([`write_json_atomic`], [`keep_games`]).
const REWRITTEN: [&str; 5] = [
    "config.json",
    "run_manifest.json",
    crate::provenance::FILE,
    "races.jsonl",
    "turns.jsonl",
];

/// Whether `entry` is what a write of a race run cut short leaves in its
/// folder: the temporary `<file>.tmp` of one of the [`REWRITTEN`] files.
/// Such a leftover holds no race.
fn is_own_leftover(entry: &std::fs::DirEntry) -> bool {
    let name = entry.file_name();
    let name = name.to_string_lossy();
    name.strip_suffix(".tmp")
        .is_some_and(|f| REWRITTEN.contains(&f))
        && entry.file_type().is_ok_and(|t| t.is_file())
}

/// The kernels an earlier start recorded in `dir`'s `config.json`, once
/// `dir` is shown to take `cfg`'s races: a new or empty folder, or a race
/// folder whose `config.json` holds this same config (the thread count
/// aside). Anything else is refused before anything is written: a folder of
/// other files (an Energy Society run), another config's races, or finished
/// races without a `config.json` to match them to.
fn check_folder(cfg: &ExperimentConfig, dir: &Path) -> anyhow::Result<Option<serde_json::Value>> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.exists() {
        let races = dir.join("races.jsonl");
        if races.exists() {
            let kept = read_jsonl(&races)?.len();
            anyhow::ensure!(
                kept == 0,
                "{} holds {kept} finished races but {} is missing: they cannot be matched to a config; use a new output folder",
                races.display(),
                cfg_path.display()
            );
        }
        // A write cut short before config.json was in place leaves only
        // its own temporary files: the folder is as good as empty.
        let empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.all(|e| e.is_ok_and(|e| is_own_leftover(&e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        anyhow::ensure!(
            empty,
            "{} is not empty and is not a race run folder (it has no config.json); nothing was written. Give a new or empty folder with --out",
            dir.display()
        );
        return Ok(None);
    }
    let not_race = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "{} is not a race run's config ({e}); nothing was written. Give a new or empty folder with --out",
            cfg_path.display()
        )
    };
    let text = std::fs::read_to_string(&cfg_path)
        .with_context(|| format!("reading {}", cfg_path.display()))?;
    let mut old: serde_json::Value = serde_json::from_str(&text).map_err(|e| not_race(&e))?;
    // The kernels of the earlier start are a record, not part of the config.
    let earlier_kernels = old.as_object_mut().and_then(|o| o.remove(KERNELS_KEY));
    let mut old: ExperimentConfig = serde_json::from_value(old).map_err(|e| not_race(&e))?;
    // The thread count says how the races are computed, not what they
    // record (`energy_society::resume::HOW_KEYS`): config.json now
    // records this start's.
    if old.llm.threads != cfg.llm.threads {
        crate::errln!(
            "note: {}: resumed with llm.threads = {} (the finished races ran with {}); the records do not depend on it, latencies do",
            cfg_path.display(),
            cfg.llm.threads.map_or("-".to_string(), |n| n.to_string()),
            old.llm.threads.map_or("-".to_string(), |n| n.to_string()),
        );
        old.llm.threads = cfg.llm.threads;
    }
    anyhow::ensure!(
        &old == cfg,
        "{} was written by a different config; nothing was written. Use a new output folder",
        cfg_path.display()
    );
    Ok(earlier_kernels)
}

/// Run (or resume) every race of `cfg` into `dir` on `backend`.
pub fn run_experiment(
    cfg: &ExperimentConfig,
    dir: &Path,
    resume: bool,
    backend: &mut dyn Backend,
) -> anyhow::Result<RunSummary> {
    // Held until the races end; what the folder holds is read under the hold.
    let _held = crate::record::FolderLock::acquire(dir)?;
    let earlier_kernels = check_folder(cfg, dir)?;
    let recorded = recorded_races(dir)?;
    if !recorded.is_empty() && !resume {
        anyhow::bail!(
            "{} already holds {} finished races; use `joule race sweep` or --resume to continue",
            dir.display(),
            recorded.len()
        );
    }
    // A race whose turns were lost (turns.jsonl cut short) is played again:
    // its record and its remaining turns are dropped first, so nothing is
    // recorded twice.
    let counts = turn_counts(dir)?;
    let done = whole_games(&recorded, &counts);
    if let Some((game, want, found)) = race_missing_turns(&recorded, &counts) {
        crate::errln!(
            "note: {}: {} finished races lack turns in turns.jsonl (game `{game}` has {found} of its {want}); they are played again",
            dir.display(),
            recorded.len() - done.len()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cfg_path = dir.join("config.json");
    write_json_atomic(&cfg_path, cfg)?;
    if done.len() < recorded.len() {
        keep_games(dir, "races.jsonl", &done)?;
    }
    keep_games(dir, "turns.jsonl", &done)?;
    let games = cfg.games()?;
    let total = games.len();
    let pending: Vec<_> = games
        .into_iter()
        .filter(|g| !done.contains(&g.game_id))
        .collect();
    let played = pending.len();
    // Every pending race runs at once on one driver: plan for all of them.
    let mut demand = crate::backend::MemoryDemand::default();
    for g in &pending {
        demand.add_run(g.models.iter().map(String::as_str));
    }
    crate::backend::check_memory(backend, &demand)?;
    // A race with model-backed seats records the kernels of their models
    // (loaded by the memory plan) in its config.json.
    if let Some(kernels) = race_kernels(cfg, backend) {
        let kernels = serde_json::to_value(kernels)?;
        if earlier_kernels.as_ref().is_some_and(|k| *k != kernels) {
            crate::errln!(
                "note: {}: the kernels differ from the earlier start's; `kernels` now records this start's",
                cfg_path.display()
            );
        }
        let mut resolved = serde_json::to_value(cfg)?;
        if let Some(o) = resolved.as_object_mut() {
            o.insert(KERNELS_KEY.into(), kernels);
        }
        write_json_atomic(&cfg_path, &resolved)?;
    }
    // What plays this start (`crate::provenance`), appended to an earlier start's; a start
    // with nothing left to play adds nothing.
    if played > 0 {
        let models: Vec<&str> = cfg
            .lineups
            .iter()
            .flat_map(|l| l.seats.iter().map(|s| s.as_str()))
            .filter(|m| !m.starts_with(SCRIPTED_PREFIX))
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .collect();
        let session = crate::provenance::Session::now(
            done.len() as u32 + 1,
            race_kernels(cfg, backend).as_ref(),
            backend.model_origins(&models),
            crate::provenance::Jobs {
                source: format!("ai-race experiment `{}`: {total} races", cfg.name),
                ..Default::default()
            },
        );
        if done.is_empty() {
            crate::provenance::Provenance::start(dir, session)?;
        } else {
            crate::provenance::Provenance::append(dir, session)?;
        }
    }
    // A torn last race (an interrupted write) is cut off, not appended to.
    crate::record::mend_tail(dir.join("races.jsonl"))?;
    let sink = Rc::new(RefCell::new(RaceSink {
        turns: EventLog::append(dir.join("turns.jsonl"))?,
        races: EventLog::append(dir.join("races.jsonl"))?,
    }));
    let mut driver = Driver::new();
    for g in pending {
        let sink = sink.clone();
        driver.spawn(move |agency| play_race(agency, g, sink));
    }
    let progress = crate::progress::calls::Tracker::sessions(
        crate::progress::Mode::from_env(),
        "race",
        played,
        std::time::Duration::from_secs(10),
    );
    let (mut calls, mut batches, mut largest_batch) = (0u64, 0usize, 0usize);
    let results = driver.run(
        &mut crate::progress::calls::Watched::new(&mut *backend, progress.clone()),
        |n| {
            calls += n as u64;
            batches += 1;
            largest_batch = largest_batch.max(n);
        },
    );
    progress.finish();
    let mut contaminated = 0;
    for r in results {
        let rec: RaceRecord = r?;
        contaminated += rec.any_parse_failure as usize;
    }
    write_tables(dir)?;
    let summary = RunSummary {
        total_races: total,
        skipped_races: total - played,
        played_races: played,
        contaminated_races: contaminated,
        batches,
        largest_batch,
    };
    write_json_atomic(
        dir.join("run_manifest.json"),
        &serde_json::json!({
            "name": cfg.name,
            "status": "completed",
            "backend": backend.name(),
            "model_calls": calls,
            "summary": summary,
            "races": completed_games(dir)?.len(),
            "seeds": {"base_seed": cfg.base_seed, "game_seed": "base_seed + rep",
                       "horizon_stream": "17 (N=2) / 53 (N>2)", "setback_stream": "29 (N=2) / 61 (N>2)"},
            "decoding": {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
                          "sampling_seed_applied": cfg.sampling_seed_applied,
                          "max_parse_retries": cfg.max_parse_retries},
        }),
    )?;
    Ok(summary)
}

/// Write `races.csv` (one row per race, per-seat columns) and `players.csv`
/// (one row per seat) from `races.jsonl` (§3.4).
pub fn write_tables(dir: &Path) -> anyhow::Result<()> {
    let races = read_races(&dir.join("races.jsonl"))?;
    let max_n = races.iter().map(|r| r.n_players).max().unwrap_or(2);
    let mut head = vec![
        "game_id",
        "lineup",
        "n_players",
        "max_private_risk",
        "persona_condition",
        "prompt_version",
        "rep",
        "game_seed",
        "n_rounds",
        "stop_forced",
        "tie",
        "winner",
        "parse_failures",
        "any_parse_failure",
        "stop_draws",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for i in 1..=max_n {
        for f in [
            "model",
            "progress",
            "stage_payoff",
            "unsafe_count",
            "unsafe_frequency",
            "private_risk",
            "prize",
            "setback",
            "final_payoff",
        ] {
            head.push(format!("p{i}_{f}"));
        }
    }
    let mut rows = CsvText::new();
    rows.record(&head);
    let mut players = CsvText::new();
    players.record([
        "game_id",
        "lineup",
        "n_players",
        "max_private_risk",
        "persona_condition",
        "rep",
        "player_index",
        "model",
        "persona",
        "outcome",
        "progress",
        "stage_payoff",
        "unsafe_count",
        "unsafe_frequency",
        "private_risk",
        "prize",
        "setback_eligible",
        "setback_draw",
        "setback",
        "final_payoff",
        "any_parse_failure",
    ]);
    for r in &races {
        let res = &r.result;
        let mut row = vec![
            r.game_id.clone(),
            r.lineup.clone(),
            r.n_players.to_string(),
            r.max_private_risk.to_string(),
            r.persona_condition.clone(),
            r.prompt_version.clone(),
            r.rep.to_string(),
            r.game_seed.to_string(),
            res.n_rounds.to_string(),
            res.stop_forced.to_string(),
            res.tie.to_string(),
            res.winner.map(|w| (w + 1).to_string()).unwrap_or_default(),
            r.parse_failures.to_string(),
            r.any_parse_failure.to_string(),
            serde_json::to_string(&res.stop_draws)?,
        ];
        for i in 0..max_n {
            match res.seats.get(i) {
                Some(s) => row.extend([
                    r.models[i].clone(),
                    s.progress.to_string(),
                    s.stage_payoff.to_string(),
                    s.unsafe_count.to_string(),
                    s.unsafe_frequency.to_string(),
                    s.private_risk.to_string(),
                    s.prize.to_string(),
                    s.setback.to_string(),
                    s.final_payoff.to_string(),
                ]),
                None => row.extend(std::iter::repeat(String::new()).take(9)),
            }
        }
        rows.record(&row);
        for (i, s) in res.seats.iter().enumerate() {
            players.record([
                r.game_id.clone(),
                r.lineup.clone(),
                r.n_players.to_string(),
                r.max_private_risk.to_string(),
                r.persona_condition.clone(),
                r.rep.to_string(),
                i.to_string(),
                r.models[i].clone(),
                r.personas[i].clone(),
                serde_json::to_value(s.outcome)?
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                s.progress.to_string(),
                s.stage_payoff.to_string(),
                s.unsafe_count.to_string(),
                s.unsafe_frequency.to_string(),
                s.private_risk.to_string(),
                s.prize.to_string(),
                s.setback_eligible.to_string(),
                s.setback_draw.to_string(),
                s.setback.to_string(),
                s.final_payoff.to_string(),
                r.any_parse_failure.to_string(),
            ]);
        }
    }
    std::fs::write(dir.join("races.csv"), rows.into_string())
        .with_context(|| format!("writing {}/races.csv", dir.display()))?;
    std::fs::write(dir.join("players.csv"), players.into_string())
        .with_context(|| format!("writing {}/players.csv", dir.display()))?;
    Ok(())
}
