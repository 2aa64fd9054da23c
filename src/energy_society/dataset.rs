//! The MMLU-Pro-Stratified question set that the reference draws its jobs
//! from (spec §3 "Dataset", "Difficulty bins"): loading it from a JSON/JSONL
//! or parquet file or from the Hugging Face cache, and binning its ten
//! difficulty tags into the three job tiers.
//!
//! Rows are kept in file order: the numpy draw of [`super::draw`] picks pool
//! positions, so the order is part of what reproduces the reference.
//!
//! Hub access (`Dataset::from_hub`) uses the `hf-hub` crate's standard cache
//! (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`), so a copy cached
//! once works offline. JSON, JSONL and parquet data files are read; a split
//! stored in several shards (`train-00000-of-00002.parquet`, …) is read shard
//! by shard in name order. Parquet files may be uncompressed or compressed
//! with snappy (what `datasets`, pyarrow and pandas write by default), zstd
//! (polars' default), gzip or LZ4; brotli is not compiled in and gives an
//! error that says how to convert the file.

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

    /// The sha256 (lowercase hex) of the questions as read, for a run's
    /// provenance: per row, in order, its id, text, options, answer index,
    /// category and difficulty tag, each field ended by a unit separator
    /// (0x1F) and each row by a newline, options joined by a record
    /// separator (0x1E). The same questions give the same digest whether
    /// read from JSON, JSONL, parquet or the hub's shards.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for q in &self.rows {
            for field in [
                q.question_id.to_string().as_str(),
                &q.question,
                &q.options.join("\u{1e}"),
                &q.answer_index.to_string(),
                &q.category,
                &q.difficulty,
            ] {
                h.update(field.as_bytes());
                h.update([0x1f]);
            }
            h.update(b"\n");
        }
        hex::encode(h.finalize())
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

    /// Read a data file by its extension: `.parquet` with
    /// [`Dataset::load_parquet`], anything else with [`Dataset::load_json`].
    pub fn load(path: impl AsRef<Path>) -> anyhow::Result<Dataset> {
        let path = path.as_ref();
        if ext(path) == "parquet" {
            Dataset::load_parquet(path)
        } else {
            Dataset::load_json(path)
        }
    }

    /// Read several data files (the shards of one split) as one data set,
    /// rows in file order, files in the given order.
    pub fn load_all(paths: &[PathBuf]) -> anyhow::Result<Dataset> {
        match paths {
            [] => bail!("no data files"),
            [one] => Dataset::load(one),
            _ => {
                let mut rows = Vec::new();
                for p in paths {
                    rows.extend(Dataset::load(p)?.rows);
                }
                let source = paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" + ");
                Ok(Dataset::from_rows(source, rows))
            }
        }
    }

    /// Read a parquet file with the columns of the JSON layout
    /// (`question_id`, `question`, `options` as a list of strings,
    /// `answer_index`, `category`, `difficulty`; other columns are ignored).
    /// Uncompressed, snappy, zstd, gzip or LZ4 (not brotli). Errors name the file,
    /// the row (0-based) and the field, as for JSON.
    pub fn load_parquet(path: impl AsRef<Path>) -> anyhow::Result<Dataset> {
        let path = path.as_ref();
        let rows = parquet_rows(path).with_context(|| format!("data set {}", path.display()))?;
        Ok(Dataset::from_rows(path.display().to_string(), rows))
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
    /// download; `HF_ENDPOINT` replaces the hub's address. Reads JSON, JSONL
    /// and parquet data files (any codec but brotli).
    pub fn from_hub(repo: &str, revision: Option<&str>) -> anyhow::Result<Dataset> {
        let offline = std::env::var("HF_HUB_OFFLINE")
            .map(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
            .unwrap_or(false);
        from_hub_in(hf_hub::Cache::from_env(), repo, revision, offline)
    }
}

/// [`Dataset::from_hub`] with an explicit cache and offline switch (tests use a
/// temporary cache folder). The endpoint comes from `HF_ENDPOINT` when set.
pub fn from_hub_in(
    cache: hf_hub::Cache,
    repo: &str,
    revision: Option<&str>,
    offline: bool,
) -> anyhow::Result<Dataset> {
    let endpoint = std::env::var("HF_ENDPOINT").ok();
    from_hub_at(cache, endpoint, repo, revision, offline)
}

/// [`from_hub_in`] with an explicit endpoint (`None`: the hub's default);
/// tests point it at a local server.
pub fn from_hub_at(
    cache: hf_hub::Cache,
    endpoint: Option<String>,
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
        let chosen = pick_train_files(&files).with_context(|| {
            format!(
                "cached copy of data set {repo}@{revision} in {}",
                snapshot.display()
            )
        })?;
        let paths: Vec<PathBuf> = chosen.iter().map(|f| snapshot.join(f)).collect();
        return Dataset::load_all(&paths);
    }
    if offline {
        bail!(
            "data set {repo}@{revision} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set; \
             download it once while online, or pass --dataset PATH with a JSON, JSONL or parquet copy",
            repo_dir.display()
        );
    }
    let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(cache.clone())
        .with_progress(false)
        .with_retries(0);
    if let Some(endpoint) = endpoint {
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
             download it once while online, or pass --dataset PATH with a JSON, JSONL or parquet copy",
            repo_dir.display()
        )
    })?;
    let names: Vec<PathBuf> = info
        .siblings
        .iter()
        .map(|s| PathBuf::from(&s.rfilename))
        .collect();
    let chosen = pick_train_files(&names)
        .with_context(|| format!("data set {repo}@{revision} on the hub"))?;
    let mut local = Vec::with_capacity(chosen.len());
    for file in &chosen {
        let name = file.to_string_lossy().replace('\\', "/");
        local.push(
            api_repo
                .get(&name)
                .with_context(|| format!("downloading {name} of data set {repo}@{revision}"))?,
        );
    }
    Dataset::load_all(&local)
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

/// Every file below `dir`, as paths relative to `dir`, sorted.
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
            } else if let Ok(rel) = path.strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    Ok(out)
}

fn ext(p: &Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default()
}

/// The train split's data files among `files` (paths relative to the
/// repository): the JSON/JSONL files whose path mentions `train`, else the
/// parquet files whose path mentions `train` (all shards, in name order),
/// else the only data file.
fn pick_train_files(files: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    fn is_train(p: &Path) -> bool {
        p.to_string_lossy().to_ascii_lowercase().contains("train")
    }
    let data: Vec<&PathBuf> = files
        .iter()
        .filter(|p| matches!(ext(p).as_str(), "json" | "jsonl" | "parquet"))
        .filter(|p| {
            // Hub metadata files are not data.
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.') || n == "dataset_infos.json")
        })
        .collect();
    let is_json = |p: &&&PathBuf| ext(p) != "parquet";
    let train_json: Vec<&PathBuf> = data
        .iter()
        .filter(is_json)
        .filter(|p| is_train(p))
        .copied()
        .collect();
    let train_parquet: Vec<&PathBuf> = data
        .iter()
        .filter(|p| !is_json(p))
        .filter(|p| is_train(p))
        .copied()
        .collect();
    let mut chosen: Vec<PathBuf> = if !train_json.is_empty() {
        train_json.into_iter().cloned().collect()
    } else if !train_parquet.is_empty() {
        train_parquet.into_iter().cloned().collect()
    } else if data.len() == 1 {
        vec![data[0].clone()]
    } else {
        bail!(
            "no JSON, JSONL or parquet data file for the train split among {} files",
            files.len()
        )
    };
    chosen.sort();
    Ok(chosen)
}

/// The columns a row needs (spec §3 "Dataset").
const FIELDS: [&str; 6] = [
    "question_id",
    "question",
    "options",
    "answer_index",
    "category",
    "difficulty",
];

/// Rows of a parquet file, each turned into the JSON object [`parse_row`]
/// checks (only the [`FIELDS`] columns).
fn parquet_rows(path: &Path) -> anyhow::Result<Vec<Question>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let hint = |e: parquet::errors::ParquetError| {
        let msg = e.to_string();
        if msg.contains("Disabled feature") {
            anyhow!(
                "{msg}: Joule reads parquet uncompressed or compressed with snappy, zstd, gzip or LZ4; \
                 rewrite the file with one of them (pyarrow: `pq.write_table(pq.read_table(src), dst, \
                 compression=\"snappy\")`) or convert it to JSON"
            )
        } else {
            anyhow!("{msg}")
        }
    };
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let reader = SerializedFileReader::new(file)
        .map_err(hint)
        .context("not a readable parquet file")?;
    let iter = reader.get_row_iter(None).map_err(hint)?;
    iter.enumerate()
        .map(|(i, row)| {
            let row = row.map_err(hint).with_context(|| format!("row {i}"))?;
            let mut obj = serde_json::Map::new();
            for (name, field) in row.get_column_iter() {
                if FIELDS.contains(&name.as_str()) {
                    let v =
                        parquet_value(field).with_context(|| format!("row {i}: field `{name}`"))?;
                    obj.insert(name.clone(), v);
                }
            }
            parse_row(&Value::Object(obj)).with_context(|| format!("row {i}"))
        })
        .collect()
}

/// A parquet value as JSON: integers, floats, strings, lists and nulls (all a
/// question row holds); anything else is an error naming the value.
fn parquet_value(f: &parquet::record::Field) -> anyhow::Result<Value> {
    use parquet::record::Field;
    Ok(match f {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(n) => Value::from(*n),
        Field::Short(n) => Value::from(*n),
        Field::Int(n) => Value::from(*n),
        Field::Long(n) => Value::from(*n),
        Field::UByte(n) => Value::from(*n),
        Field::UShort(n) => Value::from(*n),
        Field::UInt(n) => Value::from(*n),
        Field::ULong(n) => Value::from(*n),
        Field::Float(x) => Value::from(f64::from(*x)),
        Field::Double(x) => Value::from(*x),
        Field::Str(s) => Value::String(s.clone()),
        Field::ListInternal(list) => Value::Array(
            list.elements()
                .iter()
                .map(parquet_value)
                .collect::<anyhow::Result<_>>()?,
        ),
        other => bail!("unsupported parquet value {other}"),
    })
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

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/dataset")
            .join(name)
    }

    fn fixture_bytes(name: &str) -> Vec<u8> {
        std::fs::read(fixture(name)).unwrap()
    }

    /// The 7 synthetic rows of `scripts/gen_dataset_fixtures.py`.
    fn check_mini(ds: &Dataset) {
        assert_eq!(ds.rows().len(), 7);
        let r = &ds.rows()[3];
        assert_eq!(r.question_id, 9021);
        assert_eq!(r.options.len(), 6);
        assert_eq!(r.answer_index, 1);
        assert_eq!(r.options[1], "option 1 of question 3");
        assert_eq!((r.category.as_str(), r.difficulty.as_str()), ("math", "+"));
        assert!(r.question.ends_with("ünïcode ✓"), "{}", r.question);
        // Tags: -----, ---, --, +, +++, +++++, and one outside every bin.
        assert_eq!(ds.pool(Difficulty::Easy), vec![0, 1]);
        assert_eq!(ds.pool(Difficulty::Medium), vec![2, 3]);
        assert_eq!(ds.pool(Difficulty::Hard), vec![4, 5]);
    }

    #[test]
    fn parquet_reads_the_same_rows_as_json() {
        let json = Dataset::load(fixture("mini.jsonl")).unwrap();
        check_mini(&json);
        for name in [
            "mini.parquet",
            "mini-uncompressed.parquet",
            "mini-zstd.parquet",
            "mini-gzip.parquet",
            "mini-lz4.parquet",
        ] {
            let pq = Dataset::load(fixture(name)).unwrap();
            assert_eq!(pq.rows(), json.rows(), "{name}");
            assert_eq!(pq.digest(), json.digest(), "{name}");
            assert!(pq.source.ends_with(name));
        }
        // Two shards read in the given order are the whole split.
        let shards = Dataset::load_all(&[
            fixture("train-00000-of-00002.parquet"),
            fixture("train-00001-of-00002.parquet"),
        ])
        .unwrap();
        assert_eq!(shards.rows(), json.rows());
        assert_eq!(shards.digest(), json.digest());
    }

    const MINI_DIGEST: &str = "0d97bca04fef7466fb155d94932665c714081eeb73709839ded8b19a4ac3d160";

    #[test]
    fn the_digest_is_the_documented_hash_of_the_questions() {
        let json = Dataset::load(fixture("mini.jsonl")).unwrap();
        // Computed by Python from mini.jsonl, as `digest` documents it:
        // sha256(b"".join(b"".join(f.encode() + b"\x1f" for f in (str(id), question,
        // "\x1e".join(options), str(answer_index), category, difficulty)) + b"\n" for each row)).
        assert_eq!(json.digest(), MINI_DIGEST);
        let mut rows = json.rows().to_vec();
        rows[0].options.swap(0, 1);
        assert_ne!(Dataset::from_rows("x", rows).digest(), MINI_DIGEST);
    }

    #[test]
    fn parquet_errors_name_the_file_and_say_what_to_do() {
        // Brotli is not compiled in.
        let msg = format!(
            "{:#}",
            Dataset::load(fixture("mini-brotli.parquet")).unwrap_err()
        );
        assert!(msg.contains("mini-brotli.parquet"), "{msg}");
        assert!(
            msg.to_lowercase().contains("brotli") && msg.contains("snappy, zstd, gzip or LZ4"),
            "{msg}"
        );
        // A column of the wrong type names the row and the field.
        let msg = format!(
            "{:#}",
            Dataset::load(fixture("bad-options.parquet")).unwrap_err()
        );
        assert!(msg.contains("bad-options.parquet"), "{msg}");
        assert!(msg.contains("row 0") && msg.contains("`options`"), "{msg}");
        // Not a parquet file at all.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.parquet");
        std::fs::write(&p, "PAR1").unwrap();
        let msg = format!("{:#}", Dataset::load(&p).unwrap_err());
        assert!(
            msg.contains("x.parquet") && msg.contains("not a readable parquet file"),
            "{msg}"
        );
    }

    #[test]
    fn hub_reads_cached_parquet_shards_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let cache = fake_cache(dir.path(), &[("README.md", "# card".into())]);
        let snap = dir.path().join(
            "hub/datasets--SunriserFuture--MMLU-Pro-Stratified/snapshots/0123456789abcdef0123456789abcdef01234567/data",
        );
        std::fs::create_dir_all(&snap).unwrap();
        // Written in reverse order: the listing, not the file system, orders them.
        for name in [
            "train-00001-of-00002.parquet",
            "train-00000-of-00002.parquet",
        ] {
            std::fs::write(snap.join(name), fixture_bytes(name)).unwrap();
        }
        let ds = from_hub_in(cache, HUB_REPO, None, true).unwrap();
        check_mini(&ds);
        assert!(ds.source.contains("00000") && ds.source.contains(" + "));
    }

    #[test]
    fn picks_the_train_files() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        // JSON before parquet; every train shard, sorted; metadata ignored.
        assert_eq!(
            pick_train_files(&p(&[
                ".gitattributes",
                "data/train-00001-of-00002.parquet",
                "data/test.jsonl",
                "data/train-00000-of-00002.parquet",
            ]))
            .unwrap(),
            p(&[
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ])
        );
        assert_eq!(
            pick_train_files(&p(&["data/train.jsonl", "data/train-0.parquet"])).unwrap(),
            p(&["data/train.jsonl"])
        );
        // The split's folder may carry the name (`default/train/0000.parquet`).
        assert_eq!(
            pick_train_files(&p(&[
                "default/train/0000.parquet",
                "default/test/0000.parquet"
            ]))
            .unwrap(),
            p(&["default/train/0000.parquet"])
        );
        assert_eq!(
            pick_train_files(&p(&["README.md", "all.parquet"])).unwrap(),
            p(&["all.parquet"])
        );
        assert!(pick_train_files(&p(&["README.md", "dataset_infos.json"])).is_err());
        assert!(pick_train_files(&p(&["a.parquet", "b.parquet"])).is_err());
    }

    /// A tiny stand-in for the hub's HTTP API, enough for hf-hub's sync client:
    /// `GET /api/datasets/<repo>/revision/<rev>` (the file list and commit) and
    /// `GET /datasets/<repo>/resolve/<rev>/<file>` with a `Range` header (first
    /// `bytes=0-0` for the etag, commit and size, then `bytes=<from>-` for the
    /// content). Every connection answers one request and closes.
    struct HubServer {
        endpoint: String,
        /// (path, Range header) of every request, in order.
        requests: std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl HubServer {
        const COMMIT: &'static str = "fedcba9876543210fedcba9876543210fedcba98";

        fn start(repo: &str, files: Vec<(&str, Vec<u8>)>) -> HubServer {
            use std::io::{Read, Write};
            use std::sync::atomic::Ordering;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let info = serde_json::json!({
                "sha": Self::COMMIT,
                "siblings": files.iter().map(|(n, _)| serde_json::json!({"rfilename": n}))
                    .collect::<Vec<_>>(),
            })
            .to_string();
            let files: Vec<(String, Vec<u8>)> =
                files.into_iter().map(|(n, b)| (n.to_string(), b)).collect();
            let (log, halt, repo) = (requests.clone(), stop.clone(), repo.to_string());
            let thread = std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if halt.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut conn) = conn else { continue };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => break,
                        }
                    }
                    let head = String::from_utf8_lossy(&head).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let range = head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("range")
                            .then(|| v.trim().to_string())
                    });
                    log.lock().unwrap().push((path.clone(), range.clone()));
                    let resolve = format!("/datasets/{repo}/resolve/main/");
                    let (status, headers, body): (&str, String, Vec<u8>) = if path
                        == format!("/api/datasets/{repo}/revision/main")
                    {
                        (
                            "200 OK",
                            "Content-Type: application/json\r\n".into(),
                            info.as_bytes().to_vec(),
                        )
                    } else if let Some((i, (_, bytes))) = path
                        .strip_prefix(&resolve)
                        .and_then(|name| files.iter().enumerate().find(|(_, (n, _))| n == name))
                    {
                        let len = bytes.len();
                        let (from, to) = range
                            .as_deref()
                            .and_then(|r| r.strip_prefix("bytes="))
                            .and_then(|r| r.split_once('-'))
                            .map(|(a, b)| {
                                (
                                    a.parse().unwrap_or(0),
                                    b.parse().unwrap_or(len - 1).min(len - 1),
                                )
                            })
                            .unwrap_or((0, len - 1));
                        (
                            "206 Partial Content",
                            format!(
                                "ETag: \"blob{i}\"\r\nX-Repo-Commit: {}\r\nContent-Range: bytes {from}-{to}/{len}\r\n",
                                Self::COMMIT
                            ),
                            bytes[from..=to].to_vec(),
                        )
                    } else {
                        ("404 Not Found", String::new(), b"not found".to_vec())
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(&body);
                }
            });
            HubServer {
                endpoint,
                requests,
                stop,
                thread: Some(thread),
            }
        }

        fn requests(&self) -> Vec<(String, Option<String>)> {
            self.requests.lock().unwrap().clone()
        }
    }

    impl Drop for HubServer {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
            // Wake the blocking accept.
            let _ = std::net::TcpStream::connect(self.endpoint.trim_start_matches("http://"));
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// hf-hub honours proxy variables; a test against 127.0.0.1 cannot run
    /// through a proxy, so it is skipped (with a note) when one is set.
    fn proxy_set() -> bool {
        let set = [
            "ALL_PROXY",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "all_proxy",
            "https_proxy",
            "http_proxy",
        ]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| !x.is_empty()));
        if set {
            crate::errln!("skipped: a proxy variable is set");
        }
        set
    }

    #[test]
    fn hub_download_fills_the_cache_then_works_offline() {
        if proxy_set() {
            return;
        }
        let server = HubServer::start(
            HUB_REPO,
            vec![
                (".gitattributes", b"*.parquet filter=lfs".to_vec()),
                ("README.md", b"# card".to_vec()),
                (
                    "data/train-00001-of-00002.parquet",
                    fixture_bytes("train-00001-of-00002.parquet"),
                ),
                (
                    "data/train-00000-of-00002.parquet",
                    fixture_bytes("train-00000-of-00002.parquet"),
                ),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let cache = || hf_hub::Cache::new(dir.path().join("hub"));
        let ds = from_hub_at(
            cache(),
            Some(server.endpoint.clone()),
            HUB_REPO,
            None,
            false,
        )
        .unwrap();
        check_mini(&ds);
        // The requests hf-hub made: the file list, then per shard (in name
        // order) the metadata probe and the content.
        let repo_api = format!("/api/datasets/{HUB_REPO}/revision/main");
        let shard = |i: usize| {
            format!("/datasets/{HUB_REPO}/resolve/main/data/train-0000{i}-of-00002.parquet")
        };
        let reqs = server.requests();
        let want: Vec<(String, Option<String>)> = vec![
            (repo_api, None),
            (shard(0), Some("bytes=0-0".into())),
            (shard(0), Some("bytes=0-".into())),
            (shard(1), Some("bytes=0-0".into())),
            (shard(1), Some("bytes=0-".into())),
        ];
        assert_eq!(reqs, want);
        // The cache now holds the hub layout: refs/main, blobs, snapshot links.
        let repo_dir = dir
            .path()
            .join("hub/datasets--SunriserFuture--MMLU-Pro-Stratified");
        assert_eq!(
            std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
            HubServer::COMMIT
        );
        assert_eq!(
            std::fs::read(repo_dir.join("blobs/blob3")).unwrap(),
            fixture_bytes("train-00000-of-00002.parquet")
        );
        // Offline, with the server gone, the cached copy is read.
        drop(server);
        let again = from_hub_at(cache(), None, HUB_REPO, None, true).unwrap();
        assert_eq!(again.rows(), ds.rows());
        // Online again: everything is cached, so no request is made.
        let quiet = HubServer::start(HUB_REPO, vec![]);
        from_hub_at(cache(), Some(quiet.endpoint.clone()), HUB_REPO, None, false).unwrap();
        assert!(quiet.requests().is_empty());
    }

    #[test]
    fn hub_download_of_jsonl_and_a_missing_repo() {
        if proxy_set() {
            return;
        }
        let server = HubServer::start(
            "someone/other-copy",
            vec![("train.jsonl", fixture_bytes("mini.jsonl"))],
        );
        let dir = tempfile::tempdir().unwrap();
        let cache = || hf_hub::Cache::new(dir.path().join("hub"));
        let ds = from_hub_at(
            cache(),
            Some(server.endpoint.clone()),
            "someone/other-copy",
            None,
            false,
        )
        .unwrap();
        check_mini(&ds);
        // A repository the server does not know: a clear error, no panic.
        let msg = format!(
            "{:#}",
            from_hub_at(
                cache(),
                Some(server.endpoint.clone()),
                HUB_REPO,
                None,
                false
            )
            .unwrap_err()
        );
        assert!(
            msg.contains("not in the Hugging Face cache") && msg.contains("could not be reached"),
            "{msg}"
        );
    }
}
