//! The MMLU-Pro-Stratified question set that the reference draws its jobs
//! from (spec §3 "Dataset", "Difficulty bins"): loading it from a JSON/JSONL
//! file or from the Hugging Face cache, and binning its ten difficulty tags
//! into the three job tiers.
//!
//! Rows are kept in file order: the numpy draw of [`super::draw`] picks pool
//! positions, so the order is part of what reproduces the reference.
//!
//! Hub access (`Dataset::from_hub`) uses the `hf-hub` crate's standard cache
//! (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`), so a copy cached
//! once works offline. Only JSON and JSONL data files are read; the hub's
//! parquet export must be converted first (see the error text of
//! [`Dataset::from_hub`]).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde_json::Value;

use super::job::{Difficulty, Job};

/// The data set's repository on the hub (spec §3).
pub const HUB_REPO: &str = "SunriserFuture/MMLU-Pro-Stratified";

/// One question of the data set, with the fields the jobs use.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub question_id: i64,
    pub question: String,
    pub options: Vec<String>,
    /// 0-based index of the correct option.
    pub answer_index: usize,
    pub category: String,
    /// The raw difficulty tag (`-----` … `+++++`).
    pub difficulty: String,
}

impl Question {
    /// The tier of this question's tag, `None` when the tag is not one of the
    /// ten binned tags (such rows are dropped from the pools).
    pub fn tier(&self) -> Option<Difficulty> {
        difficulty_bin(&self.difficulty)
    }

    /// This question as job `id` of tier `difficulty` (reward per tier).
    pub fn to_job(&self, id: String, difficulty: Difficulty) -> Job {
        Job {
            id,
            question_id: self.question_id,
            category: self.category.clone(),
            difficulty,
            reward: difficulty.reward(),
            description: self.question.clone(),
            options: self.options.clone(),
            answer_index: self.answer_index,
        }
    }
}

/// Spec §3 "Difficulty bins": easy = `-----`, `----`, `---`;
/// medium = `--`, `-`, `+`, `++`; hard = `+++`, `++++`, `+++++`.
pub fn difficulty_bin(tag: &str) -> Option<Difficulty> {
    match tag {
        "-----" | "----" | "---" => Some(Difficulty::Easy),
        "--" | "-" | "+" | "++" => Some(Difficulty::Medium),
        "+++" | "++++" | "+++++" => Some(Difficulty::Hard),
        _ => None,
    }
}

/// The question set, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Where it was read from (for records and errors).
    pub source: String,
    rows: Vec<Question>,
}

impl Dataset {
    pub fn from_rows(source: impl Into<String>, rows: Vec<Question>) -> Self {
        Self {
            source: source.into(),
            rows,
        }
    }

    /// All rows, in file order.
    pub fn rows(&self) -> &[Question] {
        &self.rows
    }

    /// Row indices of one tier's pool, in file order (rows with other tags
    /// are in no pool).
    pub fn pool(&self, tier: Difficulty) -> Vec<usize> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, q)| q.tier() == Some(tier))
            .map(|(i, _)| i)
            .collect()
    }

    /// Read a JSON array of row objects, or JSONL (one object per line).
    /// Errors name the file, the row (0-based) and the field.
    pub fn load_json(path: impl AsRef<Path>) -> anyhow::Result<Dataset> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading data set {}", path.display()))?;
        let rows = parse_rows(&text).with_context(|| format!("data set {}", path.display()))?;
        Ok(Dataset::from_rows(path.display().to_string(), rows))
    }

    /// The `train` split of `repo` (e.g. [`HUB_REPO`]) at `revision`
    /// (default `main`), from the hf-hub cache, downloading it when it is
    /// not cached and the hub is reachable. `HF_HUB_OFFLINE=1` forbids the
    /// download. Reads JSON/JSONL data files; parquet files must be
    /// converted first, e.g. with Python:
    /// `datasets.load_dataset(repo, split="train").to_json("train.jsonl")`,
    /// then `--dataset train.jsonl`.
    pub fn from_hub(repo: &str, revision: Option<&str>) -> anyhow::Result<Dataset> {
        let offline = std::env::var("HF_HUB_OFFLINE")
            .map(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
            .unwrap_or(false);
        from_hub_in(hf_hub::Cache::from_env(), repo, revision, offline)
    }
}

/// [`Dataset::from_hub`] with an explicit cache and offline switch (tests use a
/// temporary cache folder).
pub fn from_hub_in(
    cache: hf_hub::Cache,
    repo: &str,
    revision: Option<&str>,
    offline: bool,
) -> anyhow::Result<Dataset> {
    let revision = revision.unwrap_or("main");
    let repo_dir = cache
        .path()
        .join(format!("datasets--{}", repo.replace('/', "--")));
    if let Some(snapshot) = cached_snapshot(&repo_dir, revision) {
        let files = list_files(&snapshot)?;
        let file = pick_train_file(&files, &snapshot).with_context(|| {
            format!(
                "cached copy of data set {repo}@{revision} in {}",
                snapshot.display()
            )
        })?;
        return Dataset::load_json(&file);
    }
    if offline {
        bail!(
            "data set {repo}@{revision} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set; \
             download it once while online, or pass --dataset PATH with a JSON/JSONL copy",
            repo_dir.display()
        );
    }
    let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(cache.clone())
        .with_progress(false)
        .with_retries(0);
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        builder = builder.with_endpoint(endpoint);
    }
    let api = builder
        .build()
        .context("setting up the Hugging Face client")?;
    let hub_repo = hf_hub::Repo::with_revision(
        repo.to_string(),
        hf_hub::RepoType::Dataset,
        revision.to_string(),
    );
    let api_repo = api.repo(hub_repo);
    let info = api_repo.info().map_err(|e| {
        anyhow!(
            "data set {repo}@{revision}: not in the Hugging Face cache ({}) and the hub could not be reached ({e}); \
             download it once while online, or pass --dataset PATH with a JSON/JSONL copy",
            repo_dir.display()
        )
    })?;
    let names: Vec<PathBuf> = info
        .siblings
        .iter()
        .map(|s| PathBuf::from(&s.rfilename))
        .collect();
    let chosen = pick_train_file(&names, Path::new(""))
        .with_context(|| format!("data set {repo}@{revision} on the hub"))?;
    let name = chosen.to_string_lossy().replace('\\', "/");
    let local = api_repo
        .get(&name)
        .with_context(|| format!("downloading {name} of data set {repo}@{revision}"))?;
    Dataset::load_json(&local)
}

/// The snapshot folder of `revision` in a repo's cache folder: through
/// `refs/<revision>`, or directly when `revision` is a commit hash.
fn cached_snapshot(repo_dir: &Path, revision: &str) -> Option<PathBuf> {
    let by_ref = std::fs::read_to_string(repo_dir.join("refs").join(revision))
        .ok()
        .map(|hash| repo_dir.join("snapshots").join(hash.trim()));
    let by_hash = Some(repo_dir.join("snapshots").join(revision));
    [by_ref, by_hash].into_iter().flatten().find(|p| p.is_dir())
}

fn list_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = entry
                .with_context(|| format!("listing {}", d.display()))?
                .path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The train split's data file among `files`: a `.json`/`.jsonl` whose name
/// mentions `train`, or the only JSON/JSONL data file.
fn pick_train_file(files: &[PathBuf], base: &Path) -> anyhow::Result<PathBuf> {
    fn ext(p: &Path) -> String {
        p.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default()
    }
    fn is_train(p: &Path) -> bool {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.to_ascii_lowercase().contains("train"))
    }
    let json: Vec<&PathBuf> = files
        .iter()
        .filter(|p| matches!(ext(p).as_str(), "json" | "jsonl"))
        .filter(|p| {
            // Hub metadata files are not data.
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.') || n == "dataset_infos.json")
        })
        .collect();
    if let Some(p) = json.iter().find(|p| is_train(p)) {
        return Ok(base.join(p));
    }
    if json.len() == 1 {
        return Ok(base.join(json[0]));
    }
    if files.iter().any(|p| ext(p) == "parquet") {
        bail!(
            "the train split is only available as parquet, which Joule does not read; convert it once with \
             Python (`datasets.load_dataset(\"{HUB_REPO}\", split=\"train\").to_json(\"train.jsonl\")`) \
             and pass --dataset train.jsonl"
        );
    }
    bail!(
        "no JSON/JSONL data file for the train split among {} files",
        files.len()
    )
}

/// Rows of a JSON array or of JSONL text.
fn parse_rows(text: &str) -> anyhow::Result<Vec<Question>> {
    let trimmed = text.trim_start();
    let values: Vec<Value> = if trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).context("not valid JSON")?;
        match v {
            Value::Array(items) => items,
            _ => bail!("expected a JSON array of rows"),
        }
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).with_context(|| format!("line {}: not valid JSON", i + 1))
            })
            .collect::<anyhow::Result<_>>()?
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| parse_row(v).with_context(|| format!("row {i}")))
        .collect()
}

fn parse_row(v: &Value) -> anyhow::Result<Question> {
    let obj = v
        .as_object()
        .ok_or_else(|| anyhow!("expected an object, found {}", kind(v)))?;
    let field = |name: &str| {
        obj.get(name)
            .ok_or_else(|| anyhow!("field `{name}` is missing"))
    };
    let string = |name: &str| -> anyhow::Result<String> {
        let f = field(name)?;
        f.as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("field `{name}`: expected a string, found {}", kind(f)))
    };
    let question_id = {
        let f = field("question_id")?;
        f.as_i64().ok_or_else(|| {
            anyhow!(
                "field `question_id`: expected an integer, found {}",
                kind(f)
            )
        })?
    };
    let options = {
        let f = field("options")?;
        let items = f.as_array().ok_or_else(|| {
            anyhow!(
                "field `options`: expected a list of strings, found {}",
                kind(f)
            )
        })?;
        items
            .iter()
            .enumerate()
            .map(|(j, o)| {
                o.as_str().map(str::to_string).ok_or_else(|| {
                    anyhow!("field `options`[{j}]: expected a string, found {}", kind(o))
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let answer_index = {
        let f = field("answer_index")?;
        let n = f.as_u64().ok_or_else(|| {
            anyhow!(
                "field `answer_index`: expected a non-negative integer, found {}",
                kind(f)
            )
        })?;
        if n as usize >= options.len() {
            bail!(
                "field `answer_index`: {n} is out of range for {} options",
                options.len()
            );
        }
        n as usize
    };
    Ok(Question {
        question_id,
        question: string("question")?,
        options,
        answer_index,
        category: string("category")?,
        difficulty: string("difficulty")?,
    })
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn shared_dataset_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/mmlu-pro-stratified.json")
    }

    #[test]
    fn loads_the_shared_file_in_order_with_three_pools_of_390() {
        let ds = Dataset::load_json(shared_dataset_path()).unwrap();
        assert_eq!(ds.rows().len(), 1300);
        let first = &ds.rows()[0];
        assert_eq!(first.question_id, 70);
        assert_eq!(first.category, "business");
        assert_eq!(first.difficulty, "-----");
        assert_eq!(first.answer_index, 8);
        assert_eq!(first.options.len(), 9);
        // 10 tags × 130 rows: 3, 4 and 3 tags per tier.
        assert_eq!(ds.pool(Difficulty::Easy).len(), 390);
        assert_eq!(ds.pool(Difficulty::Medium).len(), 520);
        assert_eq!(ds.pool(Difficulty::Hard).len(), 390);
        let easy = ds.pool(Difficulty::Easy);
        assert!(easy.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(easy[0], 0);
    }

    #[test]
    fn bins_follow_the_spec_and_drop_other_tags() {
        for t in ["-----", "----", "---"] {
            assert_eq!(difficulty_bin(t), Some(Difficulty::Easy));
        }
        for t in ["--", "-", "+", "++"] {
            assert_eq!(difficulty_bin(t), Some(Difficulty::Medium));
        }
        for t in ["+++", "++++", "+++++"] {
            assert_eq!(difficulty_bin(t), Some(Difficulty::Hard));
        }
        for t in ["", "0", "++++++", "easy"] {
            assert_eq!(difficulty_bin(t), None);
        }
    }

    fn row(id: i64, tag: &str) -> String {
        format!(
            r#"{{"question_id": {id}, "question": "q{id}", "options": ["a", "b"], "answer_index": 1, "category": "math", "difficulty": "{tag}"}}"#
        )
    }

    #[test]
    fn reads_jsonl_and_drops_unknown_tags_from_pools() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.jsonl");
        let text = [row(5, "+"), row(6, "weird"), row(7, "---"), row(8, "--")].join("\n");
        std::fs::write(&p, text).unwrap();
        let ds = Dataset::load_json(&p).unwrap();
        assert_eq!(ds.rows().len(), 4);
        assert_eq!(ds.pool(Difficulty::Medium), vec![0, 3]);
        assert_eq!(ds.pool(Difficulty::Easy), vec![2]);
        assert!(ds.pool(Difficulty::Hard).is_empty());
        let job = ds.rows()[3].to_job("job_1".into(), Difficulty::Medium);
        assert_eq!(job.reward, 500);
        assert_eq!(job.correct_answer(), "b");
        assert_eq!(job.question_id, 8);
    }

    #[test]
    fn malformed_rows_name_the_file_row_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        let bad = r#"{"question_id": 9, "question": "q", "options": "abc", "answer_index": 0, "category": "c", "difficulty": "+"}"#;
        std::fs::write(&p, format!("[{}, {}]", row(1, "+"), bad)).unwrap();
        let msg = format!("{:#}", Dataset::load_json(&p).unwrap_err());
        assert!(msg.contains("bad.json"), "{msg}");
        assert!(msg.contains("row 1"), "{msg}");
        assert!(msg.contains("`options`"), "{msg}");

        let missing = r#"{"question_id": 9, "question": "q", "options": ["x"], "category": "c", "difficulty": "+"}"#;
        std::fs::write(&p, format!("[{missing}]")).unwrap();
        let msg = format!("{:#}", Dataset::load_json(&p).unwrap_err());
        assert!(
            msg.contains("row 0") && msg.contains("`answer_index` is missing"),
            "{msg}"
        );

        let range = r#"{"question_id": 9, "question": "q", "options": ["x"], "answer_index": 3, "category": "c", "difficulty": "+"}"#;
        std::fs::write(&p, format!("[{range}]")).unwrap();
        let msg = format!("{:#}", Dataset::load_json(&p).unwrap_err());
        assert!(msg.contains("out of range"), "{msg}");

        let err = Dataset::load_json(dir.path().join("nope.json")).unwrap_err();
        assert!(format!("{err:#}").contains("nope.json"));
    }

    #[test]
    fn hub_offline_without_cache_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let cache = hf_hub::Cache::new(dir.path().join("hub"));
        let msg = format!(
            "{:#}",
            from_hub_in(cache, HUB_REPO, None, true).unwrap_err()
        );
        assert!(msg.contains("not in the Hugging Face cache"), "{msg}");
        assert!(msg.contains("--dataset"), "{msg}");
    }

    /// Lay out a cache folder the way hf-hub (and Python's huggingface_hub)
    /// write it: refs/main holds the commit, snapshots/<commit>/ the files.
    fn fake_cache(root: &Path, files: &[(&str, String)]) -> hf_hub::Cache {
        let repo_dir = root.join("hub/datasets--SunriserFuture--MMLU-Pro-Stratified");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
        std::fs::write(repo_dir.join("refs/main"), commit).unwrap();
        for (name, text) in files {
            let p = repo_dir.join("snapshots").join(commit).join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        hf_hub::Cache::new(root.join("hub"))
    }

    #[test]
    fn hub_reads_a_cached_copy_offline() {
        let dir = tempfile::tempdir().unwrap();
        let cache = fake_cache(
            dir.path(),
            &[
                ("README.md", "# card".into()),
                (
                    "data/train-00000-of-00001.jsonl",
                    [row(3, "++"), row(4, "+++")].join("\n"),
                ),
            ],
        );
        let ds = from_hub_in(cache, HUB_REPO, None, true).unwrap();
        assert_eq!(ds.rows().len(), 2);
        assert_eq!(ds.rows()[1].question_id, 4);
        assert_eq!(ds.pool(Difficulty::Hard), vec![1]);
        // By commit hash too.
        let cache = hf_hub::Cache::new(dir.path().join("hub"));
        let ds = from_hub_in(
            cache,
            HUB_REPO,
            Some("0123456789abcdef0123456789abcdef01234567"),
            true,
        )
        .unwrap();
        assert_eq!(ds.rows().len(), 2);
    }

    #[test]
    fn hub_parquet_only_cache_says_it_needs_conversion() {
        let dir = tempfile::tempdir().unwrap();
        let cache = fake_cache(
            dir.path(),
            &[("data/train-00000-of-00001.parquet", "PAR1".into())],
        );
        let msg = format!(
            "{:#}",
            from_hub_in(cache, HUB_REPO, None, true).unwrap_err()
        );
        assert!(msg.contains("parquet") && msg.contains("convert"), "{msg}");
    }
}
