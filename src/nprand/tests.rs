//! Bit-for-bit comparisons with numpy's own outputs
//! (`tests/fixtures/numpy/{bitgen,generator}.json`, written by
//! `scripts/gen_numpy_vectors.py`).

use serde_json::Value;

use super::*;

fn fixture(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/numpy")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    v["data"].clone()
}

fn hex(v: &Value) -> u128 {
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) => s.parse().unwrap(),
            _ => x.as_u64().unwrap(),
        })
        .collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn seed_sequence_and_pcg64_match_numpy() {
    let cases = fixture("bitgen.json");
    let cases = cases.as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for c in cases {
        let seed = hex(&c["seed"]);
        let ss = SeedSequence::new(seed);
        let pool: Vec<u64> = ss.pool().iter().map(|&w| w as u64).collect();
        assert_eq!(pool, u64s(&c["pool"]), "pool, seed {seed:#x}");
        let st32: Vec<u64> = ss.generate_state_u32(6).iter().map(|&w| w as u64).collect();
        assert_eq!(st32, u64s(&c["state_u32"]), "seed {seed:#x}");
        assert_eq!(
            ss.generate_state_u64(4),
            u64s(&c["state_u64"]),
            "seed {seed:#x}"
        );

        let mut pcg = Pcg64::from_seed_sequence(&ss);
        assert_eq!(pcg.state(), (hex(&c["pcg_state"]), hex(&c["pcg_inc"])));
        let raw: Vec<u64> = (0..8).map(|_| pcg.next_u64()).collect();
        assert_eq!(raw, u64s(&c["raw_u64"]), "raw, seed {seed:#x}");

        let mut g = Generator::new(Pcg64::from_seed_sequence(&ss));
        let got: Vec<u64> = g
            .integers(0, 1 << 32, 7)
            .unwrap()
            .into_iter()
            .map(|v| v as u64)
            .collect();
        assert_eq!(got, u64s(&c["next_u32"]), "32-bit, seed {seed:#x}");

        let mut g = default_rng(seed);
        let f: Vec<f64> = (0..5).map(|_| g.random()).collect();
        assert_eq!(f, floats(&c["random"]), "random(), seed {seed:#x}");
    }
}

#[test]
fn generator_calls_match_numpy() {
    let cases = fixture("generator.json");
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 30);
    for c in cases {
        let seed = c["seed"].as_u64().unwrap();
        let mut g = default_rng(seed as u128);
        let calls = c["calls"].as_array().unwrap();
        let outs = c["outputs"].as_array().unwrap();
        for (call, want) in calls.iter().zip(outs) {
            let kind = call[0].as_str().unwrap();
            let arg = |i: usize| call[i].as_i64().unwrap();
            let ctx = format!("seed {seed}, call {call}");
            match kind {
                "integers" => {
                    let got = g.integers(arg(1), arg(2), arg(3) as usize).unwrap();
                    assert_eq!(got, i64s(want), "{ctx}");
                }
                "choice" => {
                    let got = g
                        .choice_without_replacement(arg(1) as usize, arg(2) as usize)
                        .unwrap();
                    assert_eq!(got, i64s(want), "{ctx}");
                }
                "shuffle" => {
                    let mut x: Vec<i64> = (0..arg(1)).collect();
                    g.shuffle(&mut x);
                    assert_eq!(x, i64s(want), "{ctx}");
                }
                "random" => {
                    let got: Vec<f64> = (0..arg(1)).map(|_| g.random()).collect();
                    assert_eq!(got, floats(want), "{ctx}");
                }
                other => panic!("unknown call {other}"),
            }
        }
    }
}

#[test]
fn argument_errors_are_reported_not_panicked() {
    let mut g = default_rng(1);
    assert!(g.integers(5, 5, 1).is_err());
    assert!(g.choice_without_replacement(3, 4).is_err());
    assert_eq!(
        g.choice_without_replacement(0, 0).unwrap(),
        Vec::<i64>::new()
    );
}
