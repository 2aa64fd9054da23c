//! Values a command cannot use are refused before any work, with an error
//! that names the flag and what was expected: `generate`'s sampling values
//! (the rules of a config's `[generation]`), `calibrate`'s repetitions and
//! α, `logits --out` over an existing file, `models synth --out` a folder;
//! and `models serve-check` against a port that never answers ends at its
//! `--timeout`, saying so.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn joule(args: &[&str]) -> Output {
    Command::new(JOULE)
        .args(args)
        .stdin(Stdio::null())
        .env("JOULE_PROGRESS", "off")
        .output()
        .expect("running joule")
}

/// Runs joule, expects it to fail with an error (1, or 2 for a flag clap
/// refuses; not a panic), and returns its stderr.
fn refused(args: &[&str]) -> String {
    let o = joule(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} was accepted: {err}");
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "{args:?}: {:?} {err}",
        o.status
    );
    err
}

#[test]
fn generate_refuses_sampling_values_out_of_range() {
    let base = ["generate", "--gguf", "no-such-model.gguf", "--ids", "1,2"];
    for (flag, value, says) in [
        ("--temperature", "NaN", "expected a number >= 0, got NaN"),
        ("--temperature", "inf", "expected a number >= 0, got inf"),
        ("--temperature", "-1", "expected a number >= 0, got -1"),
        ("--top-p", "2", "expected a number in (0, 1], got 2"),
        ("--top-p", "0", "expected a number in (0, 1], got 0"),
        ("--min-p", "5", "expected a number in [0, 1], got 5"),
        ("--repeat-penalty", "0", "expected a positive number, got 0"),
        (
            "--repeat-penalty",
            "NaN",
            "expected a positive number, got NaN",
        ),
        ("--top-k", "0", "expected at least 1, got 0"),
        ("--max-tokens", "0", "expected at least 1, got 0"),
    ] {
        let arg = format!("{flag}={value}");
        let mut args = base.to_vec();
        args.push(&arg);
        let err = refused(&args);
        assert!(err.contains(&format!("{flag}: {says}")), "{arg}: {err}");
    }
    // Values in range pass the check and get as far as the (missing) model.
    let err = refused(&[
        "generate",
        "--gguf",
        "no-such-model.gguf",
        "--ids",
        "1",
        "--temperature",
        "0.7",
        "--top-p",
        "1",
        "--min-p",
        "0",
    ]);
    assert!(err.contains("no-such-model.gguf"), "{err}");
}

#[test]
fn calibrate_refuses_zero_repetitions_and_a_non_finite_alpha() {
    let base = [
        "calibrate",
        "--gguf",
        "no-such-model.gguf",
        "--meter",
        "fake-power:100",
    ];
    let mut args = base.to_vec();
    args.extend(["-r", "0"]);
    let err = refused(&args);
    assert!(
        err.contains("--repetitions: expected at least 1, got 0"),
        "{err}"
    );
    for alpha in ["NaN", "inf", "-0.5"] {
        let arg = format!("--alpha={alpha}");
        let mut args = base.to_vec();
        args.push(&arg);
        let err = refused(&args);
        assert!(
            err.contains(&format!(
                "--alpha: expected a finite number >= 0, got {alpha}"
            )),
            "{err}"
        );
    }
}

#[test]
fn logits_refuses_an_existing_out_file_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kept.npy");
    std::fs::write(&out, "precious").unwrap();
    let out_s = out.to_str().unwrap();
    let args = [
        "logits",
        "--gguf",
        "no-such-model.gguf",
        "--ids",
        "1 2",
        "--out",
        out_s,
    ];
    let err = refused(&args);
    assert!(
        err.contains(out_s) && err.contains("exists") && err.contains("--force"),
        "{err}"
    );
    // With --force it goes on (to the missing model): the file is kept for now.
    let mut forced = args.to_vec();
    forced.push("--force");
    let err = refused(&forced);
    assert!(
        !err.contains("exists") && err.contains("no-such-model.gguf"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious");
    let err = refused(&[
        "logits",
        "--gguf",
        "no-such-model.gguf",
        "--ids",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
        "--force",
    ]);
    assert!(err.contains("is a folder"), "{err}");
}

#[test]
fn synth_refuses_a_folder_as_out_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("d");
    std::fs::create_dir(&target).unwrap();
    for force in [false, true] {
        let mut args = vec![
            "models",
            "synth",
            "smollm2-135m-instruct",
            "--layers",
            "1",
            "-q",
            "--out",
            target.to_str().unwrap(),
        ];
        if force {
            args.push("--force");
        }
        let err = refused(&args);
        assert!(err.contains("is a folder, not a GGUF file"), "{err}");
        assert!(!Path::new(&format!("{}.partial", target.display())).exists());
    }
}

#[test]
fn serve_check_gives_up_on_a_silent_port_at_its_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts connections and never answers; the thread ends with the test binary.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let url = format!("http://127.0.0.1:{port}/v1");
    let t0 = Instant::now();
    let err = refused(&["models", "serve-check", &url, "--timeout", "1"]);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(err.contains("no HTTP answer within 1 s"), "{err}");
    let err = refused(&["models", "serve-check", &url, "--timeout", "0"]);
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn counts_of_zero_and_past_their_bounds_are_refused() {
    for (args, says) in [
        (&["jobs", "--seed", "1", "--rounds", "0"][..], "--rounds"),
        (
            &["bench", "--gguf", "no-such-model.gguf", "-r", "0"][..],
            "--repetitions",
        ),
        (
            &["bench", "--gguf", "no-such-model.gguf", "-s", "4294967295"][..],
            "--seqs: give one or more counts from 1 to 1024",
        ),
        (
            &["bench", "--gguf", "no-such-model.gguf", "-s", "1,0"][..],
            "--seqs: give one or more counts from 1 to 1024",
        ),
        (
            &[
                "bench",
                "society",
                "--sims",
                "4294967295",
                "--via",
                "http://127.0.0.1:9/v1",
            ][..],
            "--sims: give one or more counts from 1 to 1000",
        ),
        (
            &["race", "egt", "--pmax", "0.1,0.10"][..],
            "--pmax lists 0.1 twice",
        ),
    ] {
        let err = refused(args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("no-such-model.gguf"), "{args:?}: {err}");
    }
}

/// A command line that is not UTF-8 (a Latin-1 file name) is recorded
/// lossily in the provenance, not a panic.
#[cfg(unix)]
#[test]
fn a_race_run_takes_an_out_folder_whose_name_is_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("race.toml");
    std::fs::write(
        &cfg,
        "name = \"r\"\nrepetitions = 1\np_max = [0.6]\n[[lineups]]\nname = \"AU-CS\"\nseats = [\"scripted:AU\", \"scripted:CS\"]\n",
    )
    .unwrap();
    let out = dir.path().join(OsStr::from_bytes(b"race\xe9"));
    let o = Command::new(JOULE)
        .args([OsStr::new("race"), OsStr::new("run"), cfg.as_os_str()])
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .env("JOULE_PROGRESS", "off")
        .output()
        .expect("running joule");
    assert!(
        o.status.success(),
        "{:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let prov = std::fs::read_to_string(out.join("provenance.json")).unwrap();
    assert!(prov.contains("race\u{fffd}"), "{prov}");
}
