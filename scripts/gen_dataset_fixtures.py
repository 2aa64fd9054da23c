#!/usr/bin/env python3
"""Write the small parquet/JSONL files that src/energy_society/dataset.rs is tested on.

Usage (from the repository root):  python3 scripts/gen_dataset_fixtures.py
Needs pyarrow (pip install pyarrow).

The rows are synthetic (nothing is copied from the real data set) but have the
hub data set's columns, types and order: question_id (int64), question,
options (list of strings), answer (letter), answer_index (int64), cot_content,
category, src, difficulty. Writes tests/fixtures/dataset/:
  mini.jsonl                  the rows as JSONL (what the parquet files must read back as)
  mini.parquet                snappy (pyarrow's default, what the hub's files use)
  mini-uncompressed.parquet   no compression
  mini-zstd.parquet           zstd (what polars writes by default)
  mini-gzip.parquet           gzip
  mini-lz4.parquet            LZ4 (pyarrow's `lz4`: the LZ4_RAW codec)
  mini-brotli.parquet         brotli (not compiled in: must give a clear error)
  train-0000{0,1}-of-00002.parquet  the rows split in two shards, as the hub stores a larger split
  bad-options.parquet         `options` as a plain string (must name row and field)
"""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "dataset")

TAGS = ["-----", "---", "--", "+", "+++", "+++++", "?"]


def rows():
    out = []
    for i, tag in enumerate(TAGS):
        n = 3 + i  # 3..9 options
        options = [f"option {j} of question {i}" for j in range(n)]
        k = (2 * i + 1) % n
        out.append({
            "question_id": 9000 + 7 * i,
            "question": f"Synthetic question {i} (tag {tag}): which option is marked? ünïcode ✓",
            "options": options,
            "answer": "ABCDEFGHIJ"[k],
            "answer_index": k,
            "cot_content": "",
            "category": ["math", "law", "physics"][i % 3],
            "src": f"synthetic-{i}",
            "difficulty": tag,
        })
    return out


SCHEMA = pa.schema([
    ("question_id", pa.int64()),
    ("question", pa.string()),
    ("options", pa.list_(pa.string())),
    ("answer", pa.string()),
    ("answer_index", pa.int64()),
    ("cot_content", pa.string()),
    ("category", pa.string()),
    ("src", pa.string()),
    ("difficulty", pa.string()),
])


def main():
    os.makedirs(OUT, exist_ok=True)
    data = rows()
    with open(os.path.join(OUT, "mini.jsonl"), "w", encoding="utf-8") as f:
        for r in data:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    pq.write_table(table, os.path.join(OUT, "mini.parquet"), compression="snappy")
    pq.write_table(table, os.path.join(OUT, "mini-uncompressed.parquet"), compression="none")
    for codec in ["zstd", "gzip", "lz4", "brotli"]:
        pq.write_table(table, os.path.join(OUT, f"mini-{codec}.parquet"), compression=codec)
    pq.write_table(table.slice(0, 4), os.path.join(OUT, "train-00000-of-00002.parquet"))
    pq.write_table(table.slice(4), os.path.join(OUT, "train-00001-of-00002.parquet"))
    bad = [dict(r, options=" | ".join(r["options"])) for r in data[:2]]
    bad_schema = SCHEMA.set(SCHEMA.get_field_index("options"), pa.field("options", pa.string()))
    pq.write_table(pa.Table.from_pylist(bad, schema=bad_schema), os.path.join(OUT, "bad-options.parquet"))
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))


if __name__ == "__main__":
    main()
