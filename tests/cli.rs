//! The `hbidx` schema tools as a user runs them: real process, real exit codes.

use std::process::{Command, Output};

fn hbidx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(args)
        .output()
        .expect("hbidx runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn hex_splits_match_hbase_region_splitter() {
    let output = hbidx(&["splits", "user", "--regions", "15", "--algo", "hex"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let splits: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    let expected: Vec<String> = "123456789abcde"
        .chars()
        .map(|c| c.to_string().repeat(8))
        .collect();
    assert_eq!(splits, expected);
}

#[test]
fn hotspot_shows_sequential_vs_hashed_contrast() {
    let output = hbidx(&[
        "hotspot",
        "user",
        "--generate",
        "20000",
        "--pattern",
        "sequential",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    // Two summaries: the md5-prefix design first, then the plain key.
    let summaries: Vec<&str> = text.lines().filter(|l| l.starts_with("regions ")).collect();
    assert_eq!(summaries.len(), 2, "{text}");
    assert!(
        summaries[1].contains("cv 3.000") && summaries[1].contains("max/mean 10.000"),
        "{text}"
    );
    let cv: f64 = summaries[0]
        .split("cv ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a cv figure");
    assert!(cv < 0.1, "hashed design should spread keys: {text}");
}

#[test]
fn rowkey_and_ddl_follow_the_config() {
    let output = hbidx(&["rowkey", "user", "foo0001"]);
    assert!(output.status.success());
    // Seed 004's worked example: substr(md5("foo0001"),0,6) + "foo0001".
    assert!(
        stdout(&output).contains("printable: 95f18cfoo0001"),
        "{}",
        stdout(&output)
    );
    let output = hbidx(&["ddl", "user"]);
    let ddl = stdout(&output);
    assert!(ddl.starts_with("create 'user', {NAME => 'info'"), "{ddl}");
    assert!(ddl.contains("SPLITS => ['199999'"), "{ddl}");
}

#[test]
fn bad_config_and_bad_input_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[tables]]\nname = \"user\"\n[[tables.families]]\nname = \"info\"\n[tables.rowkey]\nparts = [{ kind = \"key\" }]\n[[tables.fields]]\nname = \"phone\"\nkind = \"phone\"\ncolumn = \"nope:phone\"\n",
    )
    .unwrap();
    for args in [
        vec!["schema", "check", bad.to_str().unwrap()],
        vec!["--config", bad.to_str().unwrap(), "ddl", "user"],
        vec!["rowkey", "nope", "x"],
        vec!["splits", "user", "--regions", "1", "--algo", "hex"],
        vec!["hotspot", "user"],
        vec!["schema", "check", "/does/not/exist.toml"],
    ] {
        let output = hbidx(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let err = stderr(&output);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let err = stderr(&hbidx(&["schema", "check", bad.to_str().unwrap()]));
    assert!(err.contains("phone") && err.contains("nope"), "{err}");
    // The shipped example config passes.
    let output = hbidx(&["schema", "check", "deploy/config/hbidx.toml"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn schema_check_validates_kafka_sources() {
    let output = hbidx(&["schema", "check", "deploy/config/hbidx-kafka.toml"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("1 Kafka source(s)"),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains("user-events (json)"),
        "{}",
        stdout(&output)
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string("deploy/config/hbidx-kafka.toml")
        .unwrap()
        .replace("format = \"json\"", "format = \"protobuf\"");
    std::fs::write(&bad, text).unwrap();
    let output = hbidx(&["schema", "check", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("sources[0]: format \"protobuf\""),
        "{}",
        stderr(&output)
    );
}
