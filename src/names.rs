//! Nearest known names for a name a user gave (a misspelled model, policy or
//! key): edit distance, and a known name the given one begins (`smollm2` for
//! `smollm2-135m-instruct`). Imports nothing from the crate, so every layer
//! (model manifests, config checks, the CLI) uses the same suggestions.

/// Up to three names of `known` within a few edits of `name`, closest first,
/// then the names `name` is the start of (shortest first).
pub fn nearest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Vec<String> {
    let lower = name.trim().to_lowercase();
    let limit = (lower.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, usize, &str)> = known
        .filter_map(|k| {
            let kl = k.to_lowercase();
            let d = edit_distance(&lower, &kl);
            if d <= limit {
                Some((0, d, k))
            } else if lower.chars().count() >= 3 && kl.starts_with(&lower) {
                Some((1, kl.len(), k))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    let mut out: Vec<String> = Vec::new();
    for (_, _, k) in scored {
        if !out.iter().any(|o| o == k) {
            out.push(k.to_string());
        }
    }
    out.truncate(3);
    out
}

/// ` (nearest: a, b)` for the names of `known` closest to `name`, or nothing
/// when none is close.
pub fn nearest_note<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> String {
    let near = nearest(name, known);
    if near.is_empty() {
        String::new()
    } else {
        format!(" (nearest: {})", near.join(", "))
    }
}

/// Levenshtein distance in characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_begins_a_known_one_suggests_it() {
        let known = ["smollm2-135m-instruct", "qwen3-8b", "qwen3:8b"];
        assert_eq!(
            nearest("smollm2", known.into_iter()),
            vec!["smollm2-135m-instruct"]
        );
        assert_eq!(
            nearest("qwen3-8bb", known.into_iter()),
            vec!["qwen3-8b", "qwen3:8b"]
        );
        assert!(nearest("zz", known.into_iter()).is_empty());
        assert_eq!(nearest_note("q", known.into_iter()), "");
    }
}
