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
        stderr(&output).contains("sources[0].format: \"protobuf\""),
        "{}",
        stderr(&output)
    );
    // Every section goes through the builder `serve` uses, `[server]` included.
    let text = std::fs::read_to_string("deploy/config/hbidx-kafka.toml").unwrap()
        + "\n[server]\nworkers = 0\n";
    std::fs::write(&bad, text).unwrap();
    let output = hbidx(&["schema", "check", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("server.workers: 0 is not within 1..=1024"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn keys_new_and_hash_agree_and_schema_check_validates_security() {
    let output = hbidx(&["keys", "new", "--id", "billing", "--scope", "lookup,admin"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    let key = lines.next().unwrap().to_string();
    assert!(key.starts_with("hbidx_") && key.len() >= 40, "{text}");
    let entry: String = lines.map(|l| format!("{l}\n")).collect();
    assert!(
        entry.contains("scopes = [\"lookup\", \"admin\"]"),
        "{entry}"
    );
    let sha256 = entry
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a sha256 line")
        .to_string();
    // `keys hash` from stdin (and as an argument) gives the same hash.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["keys", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(child.stdin.take().unwrap(), "{key}").unwrap();
    let hashed = child.wait_with_output().unwrap();
    assert_eq!(stdout(&hashed).trim(), sha256);
    assert_eq!(stdout(&hbidx(&["keys", "hash", &key])).trim(), sha256);
    assert_ne!(
        stdout(&hbidx(&["keys", "new"])).lines().nth(1),
        Some(key.as_str())
    );
    let short = hbidx(&["keys", "hash", "short"]);
    assert_eq!(short.status.code(), Some(2));
    assert!(
        stderr(&short).contains("an API key must be what `hbidx keys new` prints"),
        "{}",
        stderr(&short)
    );
    let bad_id = hbidx(&["keys", "new", "--id", "no spaces please"]);
    assert_eq!(bad_id.status.code(), Some(2));
    assert!(
        stderr(&bad_id).contains("security.keys[0].id"),
        "{}",
        stderr(&bad_id)
    );

    // The entry is a valid [security] section; a broken one names the key at fault.
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string("deploy/config/hbidx.toml").unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, format!("{example}\n{entry}")).unwrap();
    let output = hbidx(&["schema", "check", good.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("1 API key(s)"),
        "{}",
        stdout(&output)
    );
    for (broken, expected) in [
        (
            entry.replace(&sha256, &key),
            "security.keys[0].sha256: must be 64 hex characters",
        ),
        (
            entry.replace("\"admin\"", "\"superuser\""),
            "security.keys[0].scopes: unknown scope \"superuser\"",
        ),
        (
            format!("{entry}rate_limit = {{ per_second = -1 }}\n"),
            "security.keys[0].rate_limit.per_second: must be a whole number",
        ),
    ] {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, format!("{example}\n{broken}")).unwrap();
        let output = hbidx(&["schema", "check", bad.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2), "{broken}");
        assert!(stderr(&output).contains(expected), "{}", stderr(&output));
        // The key itself is never echoed.
        assert!(!stderr(&output).contains(&key), "{}", stderr(&output));
    }
}
