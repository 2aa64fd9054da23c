//! `joule jobs`: print the job lists of a run's rounds (spec §3), one line
//! per round, each a JSON array of the jobs' `question_id`s in job order
//! (`job_0` first). 12 jobs per round (4/4/4), or 6 (2/2/2) with
//! `--scarce`. Useful to check the draw against the reference's runs.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgGroup, Args};

use crate::energy_society::dataset::{Dataset, HUB_REPO};
use crate::energy_society::draw::StratifiedDraw;
use crate::energy_society::job::JobSource;
use crate::energy_society::layout::DifficultyCounts;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["dataset", "hub"])))]
pub struct JobsArgs {
    /// MMLU-Pro-Stratified as a JSON array, JSONL or parquet file (row order matters).
    #[arg(long, value_name = "PATH")]
    pub dataset: Option<PathBuf>,
    /// Read the data set from the Hugging Face cache (downloading it when online).
    #[arg(long)]
    pub hub: bool,
    /// Hub repository of the data set (with --hub).
    #[arg(long, default_value = HUB_REPO)]
    pub repo: String,
    /// Hub revision: branch, tag or commit (with --hub; default main).
    #[arg(long)]
    pub revision: Option<String>,
    /// The run's seed (`numpy.random.default_rng(seed)`).
    #[arg(long)]
    pub seed: u64,
    /// Number of rounds to print, at least 1.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// The scarce condition: 2 easy, 2 medium, 2 hard jobs per round.
    #[arg(long)]
    pub scarce: bool,
}

pub fn run(args: JobsArgs) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    write_rounds(&args, &mut stdout.lock())?;
    Ok(ExitCode::SUCCESS)
}

/// Write the `--rounds` lines of question ids to `out`.
pub fn write_rounds(args: &JobsArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let dataset = match &args.dataset {
        Some(path) => Dataset::load(path)?,
        None => Dataset::from_hub(&args.repo, args.revision.as_deref())?,
    };
    let per_tier = if args.scarce { 2 } else { 4 };
    let counts = DifficultyCounts {
        easy: per_tier,
        medium: per_tier,
        hard: per_tier,
    };
    let mut source = StratifiedDraw::new(Arc::new(dataset), args.seed, counts);
    for round in 1..=args.rounds {
        let jobs = source
            .next_round()
            .with_context(|| format!("round {round}"))?;
        let ids: Vec<i64> = jobs.iter().map(|j| j.question_id).collect();
        match writeln!(out, "{}", serde_json::to_string(&ids)?) {
            // The reader went away (`joule jobs | head -1`): it has what it wanted.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            r => r.context("writing to stdout")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(extra: &[&str]) -> JobsArgs {
        let mut argv = vec!["joule", "jobs"];
        argv.extend_from_slice(extra);
        // Other subcommands join this enum; only `jobs` is expected here.
        #[allow(irrefutable_let_patterns)]
        let Command::Jobs(a) = Cli::try_parse_from(argv).unwrap().command
        else {
            panic!("parsed as another subcommand")
        };
        a
    }

    #[test]
    fn prints_one_json_line_per_round_matching_numpy() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/mmlu-pro-stratified.json");
        let data = data.to_str().unwrap();
        for (flag, n, first) in [
            (
                None,
                12,
                vec![
                    2146, 3529, 11439, 9045, 10615, 10366, 7863, 2385, 2179, 4673, 7883, 2052,
                ],
            ),
            (Some("--scarce"), 6, vec![]),
        ] {
            let mut argv = vec!["--dataset", data, "--seed", "12345", "--rounds", "3"];
            argv.extend(flag);
            let mut buf = Vec::new();
            write_rounds(&args(&argv), &mut buf).unwrap();
            let text = String::from_utf8(buf).unwrap();
            let lines: Vec<Vec<i64>> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(lines.len(), 3);
            assert!(lines.iter().all(|l| l.len() == n));
            if !first.is_empty() {
                assert_eq!(lines[0], first);
            }
        }
    }

    /// A reader that went away after `left` bytes.
    struct ClosedPipe {
        left: usize,
    }

    impl Write for ClosedPipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_ends_quietly() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/mmlu-pro-stratified.json");
        let a = args(&[
            "--dataset",
            data.to_str().unwrap(),
            "--seed",
            "1",
            "--rounds",
            "5",
        ]);
        write_rounds(&a, &mut ClosedPipe { left: 10 }).unwrap();
    }

    #[test]
    fn needs_exactly_one_source() {
        assert!(Cli::try_parse_from(["joule", "jobs", "--seed", "1"]).is_err());
        assert!(
            Cli::try_parse_from(["joule", "jobs", "--seed", "1", "--hub", "--dataset", "x"])
                .is_err()
        );
        let a = args(&["--seed", "1", "--hub"]);
        assert!(a.hub && a.dataset.is_none());
        assert_eq!(a.repo, HUB_REPO);
    }
}
