//! Typed tables and the CSV writer that reproduces `pandas.DataFrame.to_csv(index=False)`
//! byte for byte (spec §8: "`aggregate/*.csv` files are written by pandas"), through
//! [`CsvText`] (`src/csv.rs`), the one CSV writer every CSV file of the program goes through.
//!
//! What pandas writes, and this module mirrors:
//! - floats as Python's `repr` (shortest round-trip digits; scientific when the
//!   decimal exponent is below -4 or at least 16), NaN as an empty field;
//! - integers plainly, booleans as `True`/`False`, missing values (`None`) as empty;
//! - fields quoted only when they hold a comma, a quote or a line break (csv QUOTE_MINIMAL);
//! - `\n` line endings; an empty frame (no columns) as a single `\n`.

use std::path::Path;

use anyhow::Context;

use crate::csv::CsvText;

/// One cell. The variant is the pandas dtype of its column.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    /// `None` / missing in an object column.
    Null,
}

impl Cell {
    /// A string that may be missing.
    pub fn opt_str(s: &Option<String>) -> Cell {
        s.as_ref().map_or(Cell::Null, |s| Cell::Str(s.clone()))
    }

    /// The numeric value (NaN for non-numbers), for JSON and comparisons.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Int(i) => Some(*i as f64),
            Cell::Float(f) => Some(*f),
            Cell::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }
    }

    /// The text pandas writes for this cell (before CSV quoting).
    pub fn to_csv_text(&self) -> String {
        match self {
            Cell::Int(i) => i.to_string(),
            Cell::Float(f) => py_float_repr(*f),
            Cell::Str(s) => s.clone(),
            Cell::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            Cell::Null => String::new(),
        }
    }
}

/// A table with named columns. A table with no columns is pandas' empty `DataFrame()`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(columns: &[&str]) -> Self {
        Self {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// pandas' `DataFrame()`: no columns, no rows.
    pub fn empty() -> Self {
        Self::default()
    }

    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// Index of a column by name.
    pub fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// The CSV text pandas writes for this table.
    pub fn to_csv(&self) -> String {
        if self.columns.is_empty() {
            return "\n".to_string();
        }
        let mut out = CsvText::new();
        out.record(&self.columns);
        for row in &self.rows {
            out.record(row.iter().map(Cell::to_csv_text));
        }
        out.into_string()
    }

    pub fn write_csv(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.to_csv()).with_context(|| format!("writing {}", path.display()))
    }

    /// Rows as JSON objects (column → value; NaN and missing become `null`).
    pub fn to_json(&self) -> serde_json::Value {
        let rows = self
            .rows
            .iter()
            .map(|row| {
                let mut obj = serde_json::Map::new();
                for (c, v) in self.columns.iter().zip(row) {
                    let j = match v {
                        Cell::Int(i) => serde_json::json!(i),
                        Cell::Float(f) if f.is_finite() => serde_json::json!(f),
                        Cell::Float(_) | Cell::Null => serde_json::Value::Null,
                        Cell::Str(s) => serde_json::json!(s),
                        Cell::Bool(b) => serde_json::json!(b),
                    };
                    obj.insert(c.clone(), j);
                }
                serde_json::Value::Object(obj)
            })
            .collect();
        serde_json::Value::Array(rows)
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, laid out as
/// fixed point when the decimal exponent `e` (value = d.ddd × 10^e) satisfies
/// -4 <= e < 16, otherwise as `d.ddde±XX`.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return String::new();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    // Rust's `{:e}` prints the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{:e}", x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{sign}{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                let (a, b) = digits.split_at(int_len as usize);
                format!("{sign}{a}.{b}")
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1500.0, "1500.0"),
            (0.1, "0.1"),
            (1392.9599999999998, "1392.9599999999998"),
            (0.09999999999999998, "0.09999999999999998"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (-2744.0499999999997, "-2744.0499999999997"),
            (5.0, "5.0"),
            (-0.0, "-0.0"),
            (f64::NAN, ""),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn csv_quotes_minimally_and_writes_empty_frames_as_newline() {
        let mut t = Table::new(&["a", "b", "c", "d"]);
        t.push(vec![
            Cell::Str("x,y".into()),
            Cell::Null,
            Cell::Bool(true),
            Cell::Float(f64::NAN),
        ]);
        t.push(vec![
            Cell::Str("say \"hi\"".into()),
            Cell::Int(3),
            Cell::Bool(false),
            Cell::Float(2.0),
        ]);
        assert_eq!(
            t.to_csv(),
            "a,b,c,d\n\"x,y\",,True,\n\"say \"\"hi\"\"\",3,False,2.0\n"
        );
        assert_eq!(Table::empty().to_csv(), "\n");
    }
}
