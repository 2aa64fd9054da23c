//! Text that came from outside (a model server, a state file, a config or a
//! run folder) made safe to show: on a terminal, with its control characters
//! (escape sequences, newlines) escaped, and in a Markdown table cell, with
//! `|` escaped too; the cells of such a table row read back; and the check
//! the config loaders use to refuse control characters in ids and names.

/// `text` with its control characters escaped as Rust writes them (`\n`,
/// `\u{1b}`), so that it can neither move the cursor, retitle or clear a
/// terminal, nor start a new line of a table.
pub fn terminal(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `text` as one cell of a Markdown table row: control characters escaped
/// as by [`terminal`], and `|` as `\|` (GitHub's table syntax), so the row
/// keeps its columns. [`md_cells`] reads the cell back.
pub fn md_cell(text: &str) -> String {
    terminal(text).replace('|', "\\|")
}

/// The cells of a Markdown table row `| a | b\|c |`, trimmed: split at each
/// `|` not written as `\|`, and each `\|` read as `|`.
pub fn md_cells(line: &str) -> Vec<String> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    // The text after the closing `|` is no cell.
    if !cur.trim().is_empty() || cells.is_empty() {
        cells.push(cur);
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// `Err` with what was expected when `value` (an id or a name a config gives)
/// holds a control character: names are written into tables, file names and
/// terminal lines, where a newline or an escape sequence would break them.
pub fn plain_name(value: &str) -> Result<(), String> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!(
            "expected a name without control characters (newline, tab, escape), got {:?} \
             (it holds {})",
            value,
            c.escape_default()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_for_a_terminal() {
        assert_eq!(
            terminal("\u{1b}]0;pwned\u{7}\u{1b}[2Jred\nnext\ttab"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jred\\nnext\\ttab"
        );
        assert_eq!(terminal("qwen3:8b é"), "qwen3:8b é");
    }

    #[test]
    fn markdown_cells_round_trip_pipes_and_stay_on_one_line() {
        let names = ["team|blue", "qwen3 | 8b", "a\\|b", "trailing\\", "plain"];
        let row = format!(
            "| {} |",
            names
                .iter()
                .map(|n| md_cell(n))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        assert_eq!(md_cells(&row), names);
        assert_eq!(md_cell("gemma4\ne4b|x"), "gemma4\\ne4b\\|x");
        assert!(!md_cell("a\nb\rc").contains(['\n', '\r']));
        assert_eq!(md_cells("|---|---:|"), ["---", "---:"]);
        assert_eq!(md_cells("| a | b"), ["a", "b"]);
        assert_eq!(md_cells(""), [""]);
    }

    #[test]
    fn names_with_control_characters_are_refused() {
        assert!(plain_name("team|blue").is_ok());
        for bad in ["gemma4\ne4b", "a\tb", "x\u{1b}[31m", "nul\0"] {
            let e = plain_name(bad).unwrap_err();
            assert!(e.contains("without control characters"), "{e}");
        }
    }
}
