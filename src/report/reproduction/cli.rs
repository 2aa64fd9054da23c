//! What `joule report --against` does with a [`Reproduction`]: build it from
//! the analysed conditions, write `reproduction.md`, `reproduction.csv` and
//! `reproduction.json`, and add the section to the HTML pages.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{against_paper, against_runs, read_reference, render, Against, Reproduction};
use crate::report::metrics::Mode;
use crate::report::ConditionReport;

/// Compare `reports` with `against` (`paper` or a reference folder).
pub fn compare(
    reports: &[ConditionReport],
    against: &str,
    mode: Mode,
    allow_mismatch: bool,
) -> anyhow::Result<Reproduction> {
    match Against::parse(against) {
        Against::Paper => against_paper(reports, mode, allow_mismatch),
        Against::Runs(dir) => {
            let refs: Vec<ConditionReport> = read_reference(&dir)?
                .into_iter()
                .map(|c| crate::report::analyse_with(c, mode))
                .collect();
            against_runs(reports, &refs, &dir, mode, allow_mismatch)
        }
    }
}

/// The files [`write`] writes into its folder.
pub const FILES: [&str; 3] = ["reproduction.md", "reproduction.csv", "reproduction.json"];

/// Write `reproduction.md`, `.csv` and `.json` into `out`; returns the paths.
pub fn write(r: &Reproduction, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let [md, csv, json] = FILES.map(|f| out.join(f));
    std::fs::write(&md, render::markdown(r))
        .with_context(|| format!("writing {}", md.display()))?;
    std::fs::write(&csv, render::csv(r)).with_context(|| format!("writing {}", csv.display()))?;
    crate::record::write_json_atomic(&json, r)?;
    Ok(vec![md, csv, json])
}

/// Add the "Reproduction" section to each written page.
pub fn add_to_pages(r: &Reproduction, pages: &[PathBuf]) -> anyhow::Result<()> {
    let section = render::html_section(r);
    for p in pages {
        let page =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let Some(new) = render::insert_into_page(&page, &section) else {
            anyhow::bail!(
                "{}: not a page this report wrote (no navigation or sections)",
                p.display()
            );
        };
        std::fs::write(p, new).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
