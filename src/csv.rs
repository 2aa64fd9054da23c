//! The one CSV writer every CSV file of the program goes through ([`CsvText`],
//! over `csv-core`): RFC 4180 quoting only where a field needs it, the caller
//! formats the numbers. A leaf module, so every folder (the race's files and
//! the reports) can write CSV without importing another folder.

/// CSV text, one record at a time, written by `csv-core`: a field is quoted
/// only when it holds a comma, a quote or a line break (`"` doubled inside),
/// as Python's csv `QUOTE_MINIMAL`; a record of one empty field is written
/// `""`; every record ends in `\n`. Fields are text: numbers are formatted by
/// the caller.
pub struct CsvText {
    writer: csv_core::Writer,
    out: Vec<u8>,
}

impl Default for CsvText {
    fn default() -> Self {
        Self::new()
    }
}

impl CsvText {
    pub fn new() -> Self {
        let writer = csv_core::WriterBuilder::new()
            .quote_style(csv_core::QuoteStyle::Necessary)
            .terminator(csv_core::Terminator::Any(b'\n'))
            .build();
        CsvText {
            writer,
            out: Vec::new(),
        }
    }

    /// Append one record.
    pub fn record<I, F>(&mut self, fields: I) -> &mut Self
    where
        I: IntoIterator<Item = F>,
        F: AsRef<str>,
    {
        // Room for the worst case: every byte a doubled quote, plus the
        // opening quote; a delimiter or line end writes at most three bytes.
        let mut small = [0u8; 4];
        for (i, f) in fields.into_iter().enumerate() {
            if i > 0 {
                let (_, n) = self.writer.delimiter(&mut small);
                self.out.extend_from_slice(&small[..n]);
            }
            let f = f.as_ref().as_bytes();
            let mut buf = vec![0u8; 2 * f.len() + 1];
            let (res, n_in, n_out) = self.writer.field(f, &mut buf);
            debug_assert!(res == csv_core::WriteResult::InputEmpty && n_in == f.len());
            self.out.extend_from_slice(&buf[..n_out]);
        }
        let (_, n) = self.writer.terminator(&mut small);
        self.out.extend_from_slice(&small[..n]);
        self
    }

    /// The text written so far.
    pub fn into_string(self) -> String {
        String::from_utf8(self.out).expect("CSV of UTF-8 fields is UTF-8")
    }
}

/// One CSV record without its line end (for callers that gather rows before
/// joining them with `\n`).
pub fn csv_line<I, F>(fields: I) -> String
where
    I: IntoIterator<Item = F>,
    F: AsRef<str>,
{
    let mut t = CsvText::new();
    t.record(fields);
    let mut s = t.into_string();
    s.pop();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_text_quotes_what_it_must() {
        let mut t = CsvText::new();
        t.record(["a", "", "b c", "x\ny", "cr\r", "q\"", "é,"]);
        t.record([""]);
        t.record(["", ""]);
        assert_eq!(
            t.into_string(),
            "a,,b c,\"x\ny\",\"cr\r\",\"q\"\"\",\"é,\"\n\"\"\n,\n"
        );
        assert_eq!(csv_line(["1", "a,b"]), "1,\"a,b\"");
        let long = "\"".repeat(100);
        assert_eq!(csv_line([&long]), format!("\"{}\"", "\"".repeat(200)));
    }
}
