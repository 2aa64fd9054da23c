//! Running a configured society: the job source a config names, the backend
//! for its roster, and one run into a run folder. This is the public entry a
//! later step uses to plug in LLM backends: build any [`Backend`] that
//! answers the roster's model keys and call [`run_society`] (one run) or
//! spawn [`Society::run`] futures on one [`Driver`] (many runs, batched).

use std::path::Path;

use anyhow::Context;

use crate::agency::{run_one, Driver};
use crate::backend::Backend;
use crate::backend::SCRIPTED_PREFIX;

use super::call_errors::CallErrors;
use super::config::{JobsConfig, SocietyConfig};
use super::job::JobSource;
use super::policies::scripted_backend;
use super::recorder::{mark_complete, Recorder};
use super::resume::{Answers, Plan, Replay};
use super::society::{Society, SocietyResult};
use crate::meter::run_meter::RunMeter;

/// The job source a config names.
pub fn job_source(cfg: &SocietyConfig) -> anyhow::Result<Box<dyn JobSource>> {
    match &cfg.jobs {
        JobsConfig::Procedural => Ok(Box::new(super::procedural::ProceduralJobs::new(
            cfg.seed,
            cfg.difficulty,
        ))),
        JobsConfig::Mmlu { path } => {
            let dataset = if path == "hub" {
                super::dataset::Dataset::from_hub(super::dataset::HUB_REPO, None)
            } else {
                super::dataset::Dataset::load(path)
            }
            .context("key `jobs.path`")?;
            let draw = super::draw::StratifiedDraw::new(
                std::sync::Arc::new(dataset),
                cfg.seed,
                cfg.difficulty,
            );
            draw.check()?;
            Ok(Box::new(draw))
        }
    }
}

/// Check, before anything is played or written, that every roster entry of
/// `cfg` (read from `file`) can run as configured: its scripted policy
/// exists, its model (or stand-in) is found or can be fetched
/// (`llm::preflight`).
pub fn check_roster(cfg: &SocietyConfig, file: &str) -> anyhow::Result<()> {
    let refs: Vec<crate::llm::preflight::ModelRef> = cfg
        .roster
        .iter()
        .enumerate()
        .map(|(i, a)| crate::llm::preflight::ModelRef::new(format!("roster[{i}].model"), &a.model))
        .collect();
    let policies = scripted_backend(cfg.scripted.tokens.clone(), cfg.scripted.skill).policy_names();
    crate::llm::preflight::check_models(file, &refs, &cfg.llm, &policies)
}

/// The backend of a config: scripted policies for `scripted:<policy>` agents and,
/// when the roster has model-backed agents, the `[llm]` section's backend (local
/// models on candle, or a model server, whose models are checked here).
pub fn backend_for(cfg: &SocietyConfig) -> anyhow::Result<Box<dyn Backend>> {
    backend_for_all(std::slice::from_ref(cfg))
}

/// One backend for several configs that share their `[llm]` and `[scripted]`
/// sections (the cells of a sweep): a served backend learns every roster's
/// served model names.
pub fn backend_for_all(cfgs: &[SocietyConfig]) -> anyhow::Result<Box<dyn Backend>> {
    let cfg = cfgs.first().context("no config to build a backend for")?;
    let scripted = scripted_backend(cfg.scripted.tokens.clone(), cfg.scripted.skill);
    if cfgs
        .iter()
        .flat_map(|c| &c.roster)
        .all(|a| a.model.starts_with(SCRIPTED_PREFIX))
    {
        return Ok(Box::new(scripted));
    }
    let mut names = crate::served::config::ServedNames::default();
    for c in cfgs {
        names.add(
            cfg.llm.model.as_deref(),
            c.roster.iter().enumerate().map(|(i, a)| {
                (
                    format!("{}: roster[{i}]", c.name),
                    a.model.as_str(),
                    a.model_name.as_str(),
                )
            }),
        )?;
    }
    let backend = crate::llm::build_backend(&cfg.llm, scripted, names)?;
    // The measured cost model needs a meter before round 1, not a failed call later.
    if let Some(c) = cfgs
        .iter()
        .find(|c| c.cost.model == crate::energy::CostKind::Measured)
    {
        use crate::meter::attribution::MeterStatus;
        match backend.metering() {
            Some(MeterStatus::Measured(_)) => {}
            Some(MeterStatus::NotMeasured { reason }) => anyhow::bail!(
                "config `{}`: key `cost.model`: \"measured\" prices calls by measured joules, and {reason} (see `joule meters`; `[llm] meter`)",
                c.name
            ),
            None => anyhow::bail!(
                "config `{}`: key `cost.model`: \"measured\" needs a local model backend with an energy meter",
                c.name
            ),
        }
    }
    Ok(backend)
}

/// Makes the job source of a config (normally [`job_source`]); shared by a
/// sweep's worker threads.
pub type MakeJobs<'a> = &'a (dyn Fn(&SocietyConfig) -> anyhow::Result<Box<dyn JobSource>> + Sync);

/// Build the society of `cfg`, writing records into `out` (or memory only).
pub fn society(
    cfg: SocietyConfig,
    out: Option<&Path>,
    make_jobs: MakeJobs,
) -> anyhow::Result<Society> {
    let jobs = make_jobs(&cfg)?;
    let rec = match out {
        Some(dir) => Recorder::create(dir, &cfg)?,
        None => Recorder::in_memory(),
    };
    Ok(Society::new(cfg, jobs, rec))
}

/// Build the society of `cfg` recording into the folder `out` from round 1,
/// with the provenance of a session on `backend` (`crate::provenance`).
fn recorded_society(
    cfg: SocietyConfig,
    out: &Path,
    make_jobs: MakeJobs,
    backend: &dyn Backend,
) -> anyhow::Result<Society> {
    let jobs = make_jobs(&cfg)?;
    let mut rec = Recorder::create(out, &cfg)?;
    rec.provenance(session(backend, &cfg, jobs.as_ref(), 1))?;
    Ok(Society::new(cfg, jobs, rec))
}

/// The provenance session of a run of `cfg` on `backend` playing from
/// `from_round`: the build, this machine and the kernels of the resolved
/// config ([`with_kernels`]), where each model-backed agent's answers come
/// from, and the job source.
fn session(
    backend: &dyn Backend,
    cfg: &SocietyConfig,
    jobs: &dyn JobSource,
    from_round: u32,
) -> crate::provenance::Session {
    let mut models: Vec<&str> = cfg
        .roster
        .iter()
        .map(|a| a.model.as_str())
        .filter(|m| !m.starts_with(SCRIPTED_PREFIX))
        .collect();
    models.dedup();
    crate::provenance::Session::now(
        from_round,
        cfg.kernels.as_ref(),
        backend.model_origins(&models),
        jobs.origin(),
    )
}

/// Check, before anything is played, that the models of these concurrent
/// runs and every model-backed agent's sequence state fit the backend's
/// device (`inference::memory_plan`): an error on a GPU where they do not,
/// with the number of runs that would fit; a warning on stderr on the CPU.
pub fn check_memory(backend: &mut dyn Backend, cfgs: &[&SocietyConfig]) -> anyhow::Result<()> {
    let mut demand = crate::backend::MemoryDemand::default();
    for c in cfgs {
        demand.add_run(c.roster.iter().map(|a| a.model.as_str()));
    }
    crate::backend::check_memory(backend, &demand)
}

/// `cfg` with the `[kernels]` record its resolved config carries: the
/// kernels `backend` computes the roster's models with (after
/// [`check_memory`] loaded them), or none when every agent is scripted (a
/// scripted run's resolved config stays as it was). A `[kernels]` table the
/// config was read with is replaced.
pub fn with_kernels(mut cfg: SocietyConfig, backend: &dyn Backend) -> SocietyConfig {
    let models: Vec<&str> = cfg
        .roster
        .iter()
        .map(|a| a.model.as_str())
        .filter(|m| !m.starts_with(SCRIPTED_PREFIX))
        .collect();
    let kernels = if models.is_empty() {
        None
    } else {
        backend.kernels(&models)
    };
    cfg.kernels = kernels;
    cfg
}

/// Run one society to the end on `backend`.
pub fn run_society(
    cfg: SocietyConfig,
    backend: &mut dyn Backend,
    out: Option<&Path>,
    on_round: impl FnMut(u32) + 'static,
) -> anyhow::Result<SocietyResult> {
    check_memory(backend, &[&cfg])?;
    let cfg = with_kernels(cfg, backend);
    let ids = agent_ids(&cfg);
    let s = match out {
        Some(dir) => recorded_society(cfg, dir, &job_source, backend)?,
        None => society(cfg, None, &job_source)?,
    }
    .on_round(on_round);
    let result = run_one(backend, |agency| s.run(agency))?;
    if let Some(dir) = out {
        CallErrors::write(dir, &ids)?;
        mark_complete(dir)?;
    }
    Ok(result)
}

/// Run one society into the folder `out`, resuming the interrupted run
/// there when it has the same resolved config and a complete round
/// (`super::resume`; refused when the config differs, unless `force`, which
/// starts it again). `on_resume` gets the rounds kept before the run goes
/// on; `on_round` is called for the rounds played from there.
pub fn run_or_resume(
    cfg: SocietyConfig,
    backend: &mut dyn Backend,
    out: &Path,
    force: bool,
    on_resume: impl FnOnce(u32),
    mut on_round: impl FnMut(u32) + 'static,
) -> anyhow::Result<SocietyResult> {
    check_memory(backend, &[&cfg])?;
    let cfg = with_kernels(cfg, backend);
    let ids = agent_ids(&cfg);
    // Held until the run ends; what the folder holds is read under the hold.
    let _held = hold(out, force)?;
    // From which round this session plays, and whether it wrote to the
    // folder (a refused resume leaves it untouched).
    let mut from_round = 1;
    let mut wrote = false;
    let sessions = || crate::provenance::sessions_in(out);
    let sessions_before = sessions();
    let played = (|| match super::resume::plan(out, &cfg.to_toml()?, force)? {
        Plan::Fresh => {
            if !force && !Recorder::is_complete(out) && out.join("events.jsonl").is_file() {
                crate::errln!(
                    "note: {} holds an incomplete run without a complete round: starting it again",
                    out.display()
                );
            }
            let s = recorded_society(cfg, out, &job_source, backend)?.on_round(on_round);
            wrote = true;
            run_one(backend, |agency| s.run(agency))
        }
        Plan::Resume(mut r) => {
            let kept = r.rounds;
            from_round = kept + 1;
            on_resume(kept);
            let jobs = job_source(&cfg)?;
            let mut rec = r.recorder(out)?;
            rec.provenance(session(backend, &cfg, jobs.as_ref(), kept + 1))?;
            let s = Society::new(cfg, jobs, rec).on_round(move |n| {
                if n > kept {
                    on_round(n)
                }
            });
            let mut driver = Driver::new();
            driver.spawn(move |agency| s.run(agency));
            let answers = r.answers(driver.sessions()[0]);
            let mut replay = Replay::new(backend, answers);
            driver
                .run(&mut replay, |_| {})
                .pop()
                .unwrap_or_else(|| Err(anyhow::anyhow!("missing scenario result")))
        }
    })();
    // The session's energy is kept however it ended, once it wrote to the
    // folder (a resume does once its kept rounds came again: its session is
    // then in provenance.json); a stopped run's resume adds its own
    // (`meter::run_meter`).
    let wrote = wrote || sessions() > sessions_before;
    let metered = match (&played, backend.metering()) {
        (Ok(_), Some(status)) => RunMeter::record(out, from_round, status).map(|_| ()),
        (Err(_), Some(status)) if wrote => {
            if let Err(e) = RunMeter::record(out, from_round, status) {
                crate::errln!("warning: this session's energy was not recorded: {e:#}");
            }
            Ok(())
        }
        _ => Ok(()),
    };
    let result = played?;
    metered?;
    CallErrors::write(out, &ids)?;
    mark_complete(out)?;
    Ok(result)
}

/// Hold the run folder `dir` for this process ([`crate::record::FolderLock`]);
/// a run another process completed meanwhile is refused unless `force`.
fn hold(dir: &Path, force: bool) -> anyhow::Result<crate::record::FolderLock> {
    let held = crate::record::FolderLock::acquire(dir)?;
    anyhow::ensure!(
        force || !Recorder::is_complete(dir),
        "{} already holds a complete run (another process finished it); nothing was run",
        dir.display()
    );
    Ok(held)
}

fn agent_ids(cfg: &SocietyConfig) -> Vec<String> {
    cfg.roster.iter().map(|a| a.agent_id.clone()).collect()
}

/// The society of a sweep's cell in `dir`: resumed from the last complete
/// round of an incomplete run with the same resolved config there
/// (`super::resume`), else from round 1 (a run of another config is
/// replaced: the sweep file defines the cell). Records that cannot be read
/// stop the cell with the folder untouched.
fn cell_society(
    cfg: SocietyConfig,
    dir: &Path,
    make_jobs: MakeJobs,
    backend: &dyn Backend,
) -> anyhow::Result<(Society, Option<super::resume::Resumed>)> {
    match super::resume::plan(dir, &cfg.to_toml()?, false) {
        Ok(Plan::Resume(r)) => {
            let jobs = make_jobs(&cfg)?;
            let mut rec = r.recorder(dir)?;
            rec.provenance(session(backend, &cfg, jobs.as_ref(), r.rounds + 1))?;
            Ok((Society::new(cfg, jobs, rec), Some(r)))
        }
        Ok(Plan::Fresh) => Ok((recorded_society(cfg, dir, make_jobs, backend)?, None)),
        Err(e) if e.is::<super::resume::OtherConfig>() => {
            Ok((recorded_society(cfg, dir, make_jobs, backend)?, None))
        }
        Err(e) => Err(e),
    }
}

/// Run several societies concurrently on one driver, so their calls batch
/// per model; each resumes an interrupted run in its folder as
/// [`cell_society`] says. Results come back in order.
pub fn run_many(
    cells: Vec<(SocietyConfig, std::path::PathBuf)>,
    backend: &mut dyn Backend,
    make_jobs: MakeJobs,
    mut on_batch: impl FnMut(usize),
) -> Vec<anyhow::Result<SocietyResult>> {
    if let Err(e) = check_memory(backend, &cells.iter().map(|(c, _)| c).collect::<Vec<_>>()) {
        let msg = format!("{e:#}");
        return cells
            .iter()
            .map(|_| Err(anyhow::anyhow!("{msg}")))
            .collect();
    }
    let mut driver = Driver::new();
    let mut early: Vec<Option<anyhow::Error>> = Vec::new();
    let mut finish: Vec<(std::path::PathBuf, Vec<String>)> = Vec::new();
    let mut answers = Answers::new();
    // Each cell's folder is held until every cell has run.
    let mut held = Vec::new();
    for (cfg, dir) in cells {
        let cfg = with_kernels(cfg, backend);
        finish.push((dir.clone(), agent_ids(&cfg)));
        let prepared = hold(&dir, false).and_then(|lock| {
            held.push(lock);
            cell_society(cfg, &dir, make_jobs, &*backend)
        });
        match prepared.with_context(|| format!("preparing {}", dir.display())) {
            Ok((s, resumed)) => {
                driver.spawn(move |agency| s.run(agency));
                if let Some(mut r) = resumed {
                    let session = driver.sessions()[driver.sessions().len() - 1];
                    answers.extend(r.answers(session));
                }
                early.push(None);
            }
            Err(e) => early.push(Some(e)),
        }
    }
    let mut replay = Replay::new(backend, answers);
    let mut results = driver.run(&mut replay, &mut on_batch).into_iter();
    early
        .into_iter()
        .zip(finish)
        .map(|(e, (dir, ids))| match e {
            Some(e) => Err(e),
            None => results
                .next()
                .unwrap_or_else(|| Err(anyhow::anyhow!("missing scenario result")))
                .and_then(|r| {
                    CallErrors::write(&dir, &ids)?;
                    mark_complete(&dir)?;
                    Ok(r)
                }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripted_run_records_no_kernels() {
        let mut cfg = SocietyConfig::baseline("random");
        cfg.max_rounds = 1;
        // Written by an earlier run: replaced, here by nothing.
        cfg.kernels = Some(Default::default());
        let mut plain = cfg.clone();
        plain.kernels = None;
        let mut backend = backend_for(&cfg).unwrap();
        assert!(backend.kernels(&["scripted:random"]).is_none());
        let dir = tempfile::tempdir().unwrap();
        run_society(cfg, backend.as_mut(), Some(dir.path()), |_| {}).unwrap();
        let resolved = std::fs::read_to_string(dir.path().join("config.resolved.toml")).unwrap();
        assert!(!resolved.contains("kernels"), "{resolved}");
        assert_eq!(resolved, plain.to_toml().unwrap());
    }

    #[test]
    fn a_resolved_config_with_kernels_reads_back() {
        let mut cfg = SocietyConfig::baseline("random");
        let mut k = crate::backend::KernelRecord::served("openai");
        k.types.insert("Q4_1".into(), "joule".into());
        k.models
            .entry("m:1b".into())
            .or_default()
            .insert("Q4_1".into(), "joule (3 matrices)".into());
        cfg.kernels = Some(k);
        let text = cfg.to_toml().unwrap();
        assert!(text.contains("\n[kernels]\n"), "{text}");
        let back = SocietyConfig::from_toml_str(&text, "config.resolved.toml").unwrap();
        assert_eq!(back, cfg);
        // Fields a later version adds are no error.
        let newer = text.replace("\n[kernels]\n", "\n[kernels]\nfuture = 1\n");
        assert!(SocietyConfig::from_toml_str(&newer, "config.resolved.toml").is_ok());
    }
}
