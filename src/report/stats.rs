//! Sums, means and standard deviations taken exactly as pandas takes them
//! (spec §9), so that every aggregate equals the reference CSVs to the last bit:
//! - group sums and means: Kahan-compensated, in row order, skipping NaN
//!   (`pandas._libs.groupby.group_sum/group_mean`);
//! - group std: Welford updates, ddof = 1, NaN below two values (`group_var`);
//! - the one Series-level mean/std (collisions per run): numpy's pairwise sum and
//!   a two-pass variance (`pandas.core.nanops.nanmean/nanvar`).
//!
//! Also the group-by helper: groups sorted by key (pandas `sort=True`), rows kept
//! in their original order inside a group, and rows with a missing key dropped
//! (pandas `dropna=True`).

use std::collections::BTreeMap;

/// Kahan-compensated sum of the non-NaN values (pandas `group_sum`, `min_count=0`).
pub fn ksum(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut sum = 0.0f64;
    let mut comp = 0.0f64;
    for v in xs {
        if v.is_nan() {
            continue;
        }
        let y = v - comp;
        let t = sum + y;
        comp = (t - sum) - y;
        if comp.is_nan() {
            // pandas GH#53606: an infinite value must not turn the sum into NaN.
            comp = 0.0;
        }
        sum = t;
    }
    sum
}

/// Kahan mean of the non-NaN values; NaN when there are none (pandas `group_mean`).
pub fn kmean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let vals: Vec<f64> = xs.into_iter().filter(|v| !v.is_nan()).collect();
    if vals.is_empty() {
        return f64::NAN;
    }
    ksum(vals.iter().copied()) / vals.len() as f64
}

/// Sample std (ddof = 1) by Welford updates over the non-NaN values; NaN below
/// two values (pandas `group_var`, then `sqrt`).
pub fn welford_std(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut n = 0u64;
    let mut mean = 0.0f64;
    let mut m2 = 0.0f64;
    for v in xs {
        if v.is_nan() {
            continue;
        }
        n += 1;
        let old = mean;
        mean += (v - old) / n as f64;
        m2 += (v - mean) * (v - old);
    }
    if n < 2 {
        f64::NAN
    } else {
        (m2 / (n - 1) as f64).sqrt()
    }
}

/// numpy's pairwise summation of a contiguous float64 array (`pairwise_sum`
/// in `loops_utils.h`): a plain loop below 8 values, eight accumulators up to
/// 128, recursive halving (at a multiple of 8) above.
pub fn np_sum(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 8 {
        // numpy starts from -0.0 only for the empty reduction identity; a plain
        // left-to-right sum from the first element is what it computes here.
        let mut res = 0.0;
        for (i, v) in xs.iter().enumerate() {
            res = if i == 0 { *v } else { res + v };
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&xs[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for k in 0..8 {
                r[k] += xs[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += xs[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        np_sum(&xs[..n2]) + np_sum(&xs[n2..])
    }
}

/// pandas `Series.mean()` (nanops.nanmean) of values without NaN.
pub fn series_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    np_sum(xs) / xs.len() as f64
}

/// pandas `Series.std()` (nanops.nanvar, ddof = 1): two passes with numpy sums.
pub fn series_std(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return f64::NAN;
    }
    let avg = np_sum(xs) / n as f64;
    let sq: Vec<f64> = xs.iter().map(|v| (avg - v) * (avg - v)).collect();
    (np_sum(&sq) / (n - 1) as f64).sqrt()
}

/// Group rows by a key, sorted by key; a `None` key drops the row (pandas `dropna`).
pub fn group_by<'a, R, K: Ord>(
    rows: impl IntoIterator<Item = &'a R>,
    key: impl Fn(&'a R) -> Option<K>,
) -> BTreeMap<K, Vec<&'a R>>
where
    R: 'a,
{
    let mut out: BTreeMap<K, Vec<&'a R>> = BTreeMap::new();
    for r in rows {
        if let Some(k) = key(r) {
            out.entry(k).or_default().push(r);
        }
    }
    out
}

/// Number of distinct non-missing values (pandas `nunique`).
pub fn nunique<'a, T: Ord + 'a>(xs: impl IntoIterator<Item = Option<&'a T>>) -> i64 {
    let set: std::collections::BTreeSet<&T> = xs.into_iter().flatten().collect();
    set.len() as i64
}

/// Keep the first occurrence of each value, in order (pandas `drop_duplicates`).
pub fn unique_in_order<T: PartialEq + Clone>(xs: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in xs {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kahan_and_welford_reproduce_spec_section_9() {
        // comp_with_discussion: agent_4 rounds active [28, 13, 6, 5, 18].
        let xs = [28.0, 13.0, 6.0, 5.0, 18.0];
        assert_eq!(kmean(xs), 14.0);
        assert_eq!(welford_std(xs), 9.460443964212251);
        let ys = [7.0, 4.0, 6.0, 3.0, 6.0];
        assert_eq!(welford_std(ys), 1.6431676725154984);
        // Collisions per run [19, 11, 11, 9, 14] through Series.std.
        let c = [19.0, 11.0, 11.0, 9.0, 14.0];
        assert_eq!(series_mean(&c), 12.8);
        assert_eq!(series_std(&c), 3.8987177379235853);
        assert!(welford_std([1.0]).is_nan());
        assert!(kmean([f64::NAN]).is_nan());
    }

    #[test]
    fn kahan_differs_from_naive_sum() {
        let xs = [0.1; 10];
        let naive: f64 = xs.iter().sum();
        assert_ne!(naive, 1.0);
        assert_eq!(ksum(xs), 1.0);
    }

    #[test]
    fn numpy_pairwise_sum_matches_numpy() {
        // Values printed by numpy 2.4: `np.array([0.1*i+1e-3 for i in range(n)]).sum()`.
        let xs = |n: usize| (0..n).map(|i| 0.1 * i as f64 + 1e-3).collect::<Vec<f64>>();
        assert_eq!(np_sum(&xs(20)), 19.02);
        assert_eq!(np_sum(&xs(300)), 4485.3);
        // A plain left-to-right sum differs for 300 values.
        assert_eq!(xs(300).iter().sum::<f64>(), 4485.300000000003);
    }
}
