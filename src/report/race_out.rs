//! `joule race report --out`: the race report staged beside its folder
//! ([`StagedReport`]), its HTML page added with `--html`, then moved in with the
//! rules of `joule report --out` ([`super::out_dir`]): a folder that holds files
//! is refused unless forced, and forced, it is refused when the report would
//! overwrite a file no earlier report wrote; only an earlier report's own files
//! are removed. Nothing reaches the folder before every file was written.

use std::path::{Path, PathBuf};

use super::out_dir::{files, OutDir};
use crate::race::report::StagedReport;

/// Write the race report of `dirs` into `out` (see the module doc); returns
/// the Markdown text.
pub fn write_report_out(
    dirs: &[PathBuf],
    out: &Path,
    human: Option<&Path>,
    html: bool,
    force: bool,
) -> anyhow::Result<String> {
    if !force {
        // Refused before the work, not only after it.
        OutDir::prepare(out, false, "--out", &Default::default())?;
    }
    let staged = StagedReport::write(dirs, out, human)?;
    if html {
        super::html::race::write_race(dirs, staged.dir())?;
    }
    let planned = files(staged.dir())?;
    let out_dir = OutDir::prepare(out, force, "--out", &planned)?;
    let md = staged.commit(out)?;
    out_dir.finish()?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::race::config::ExperimentConfig;
    use crate::race::run::{run_experiment, scripted_backend};

    /// `race report --out` refuses a folder that holds files unless forced, as
    /// `joule report --out` does; forced, it removes only its own earlier files.
    #[test]
    fn race_report_refuses_a_folder_with_files_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let cfg = ExperimentConfig::from_toml_str(
            "name = \"small\"\nrepetitions = 2\np_max = [0.1, 0.9]\n[[lineups]]\nname = \"AU-CS\"\nseats = [\"scripted:AU\", \"scripted:CS\"]\n",
            "small.toml",
        )
        .unwrap();
        run_experiment(&cfg, &out, false, &mut scripted_backend(None)).unwrap();
        let rep = dir.path().join("rep");
        std::fs::create_dir(&rep).unwrap();
        std::fs::write(rep.join("report.md"), "# Energy Society report\n").unwrap();
        let e = write_report_out(&[out.clone()], &rep, None, false, false).unwrap_err();
        assert!(
            e.to_string().contains("not empty") && e.to_string().contains("--force"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(rep.join("report.md")).unwrap(),
            "# Energy Society report\n"
        );
        let fresh = dir.path().join("fresh");
        write_report_out(&[out.clone()], &fresh, None, true, false).unwrap();
        assert!(fresh.join("report.html").is_file() && fresh.join("unsafe_rates.csv").is_file());
        assert!(write_report_out(&[out.clone()], &fresh, None, false, false).is_err());
        std::fs::write(fresh.join("notes.txt"), "mine").unwrap();
        let md = write_report_out(&[out.clone()], &fresh, None, false, true).unwrap();
        assert!(md.starts_with("# AI race report"));
        assert!(fresh.join("notes.txt").is_file() && !fresh.join("report.html").exists());
        let listed = std::fs::read_to_string(fresh.join(crate::report::out_dir::MANIFEST)).unwrap();
        assert!(
            listed.contains("report.md") && !listed.contains("notes.txt"),
            "{listed}"
        );
    }
}
