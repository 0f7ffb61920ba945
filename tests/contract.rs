//! The REST API against its own OpenAPI document, over a real socket: `hbidx demo` serves
//! `/openapi.json`, openapi-spec-validator checks it is valid OpenAPI 3.1, and schemathesis runs
//! every operation with generated and boundary inputs (examples, coverage, fuzzing and stateful
//! phases), with a key of every scope (the internal routes' `cluster` one included), made by
//! `hbidx keys new` and configured in `[security]`.
//!
//! Checks: every one schemathesis has except `positive_data_acceptance`, which expects a 2xx
//! for any value the schema admits; a phone or idcard parameter is a string in the schema, and
//! what the normalisers accept (spaces, dashes, +86, checksums) is not a JSON Schema pattern.
//! And except `use_after_free`, which expects a row to be gone after any 200 `DELETE`: a delete
//! with `?ts=` removes only the cells up to that timestamp, as HBase's `deleteAllRowTs` does, so
//! a row written after it rightly stays (tests/e2e_embedded.rs checks deletes, with and without
//! `ts`).
//! So: no 5xx, no status code, content type, header or body the document doesn't declare, and
//! invalid input refused.
//!
//! Both tools are PyPI packages that `scripts/test.sh` installs (pinned there).

mod util;

use std::process::Command;

use util::Server;

/// schemathesis' command line (it has no `python -m` entry point).
const SCHEMATHESIS: &str = "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'schemathesis'; sys.exit(schemathesis())";

/// Runs a command, returns its exit status and its output, stdout then stderr.
fn run(command: &mut Command) -> (bool, String) {
    let output = command.output().unwrap_or_else(|err| {
        panic!("cannot run {command:?}: {err} (bash scripts/test.sh installs it)")
    });
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
#[ignore = "needs schemathesis and openapi-spec-validator (PyPI): scripts/test.sh installs them and runs it"]
fn the_api_matches_its_openapi_document() {
    let dir = tempfile::tempdir().unwrap();
    // A key with every scope: the client key (`HBIDX_API_KEY`) has all but `cluster`, and the
    // internal routes are operations of the document too.
    let made = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["keys", "new", "--id", "schemathesis", "--scope"])
        .arg("lookup,write,admin,cluster")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let made = String::from_utf8(made.stdout).unwrap();
    let key = made.lines().nth(1).expect("the key line").to_string();
    let entry = &made[made.find("[[security.keys]]").expect("the config entry")..];
    let config = dir.path().join("hbidx.toml");
    std::fs::write(
        &config,
        format!("{}\n{entry}", include_str!("../deploy/config/hbidx.toml")),
    )
    .unwrap();
    let server = Server::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "demo",
            "--rows",
            "2000",
        ],
        &dir.path().join("data"),
        &[],
    );

    let document = reqwest::blocking::get(server.url("/openapi.json")).unwrap();
    assert_eq!(document.status(), 200, "/openapi.json is public");
    let text = document.text().unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["openapi"], "3.1.0");
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, &text).unwrap();
    let (valid, output) = run(Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&path));
    assert!(valid, "openapi-spec-validator:\n{output}");

    // One worker: schemathesis' coverage phase builds Hypothesis strategies whose lambda
    // descriptions call ast.parse, which is not thread-safe on CPython 3.11 ("AST constructor
    // recursion depth mismatch") when two workers do it at once.
    // Through python3 (the one pip installed it for) rather than a console script on PATH.
    let (passed, output) = run(Command::new("python3")
        .args(["-c", SCHEMATHESIS, "run"])
        .arg(server.url("/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {key}")])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance,use_after_free",
        ])
        .args(["--workers", "1", "--max-examples", "100"])
        .args(["--request-timeout", "10", "--no-color"])
        .current_dir(dir.path()));
    let summary: Vec<&str> = output
        .lines()
        .skip_while(|line| !line.contains("SUMMARY"))
        .collect();
    println!("{}", summary.join("\n"));
    assert!(passed, "schemathesis failed:\n{output}");
    // Every operation was tested (schemathesis leaves out the document's own route), and the
    // run ended without failures or errors.
    let operations = json["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, _)| *path != "/openapi.json")
        .map(|(_, item)| item.as_object().unwrap().len())
        .sum::<usize>();
    assert!(
        output.contains(&format!("Tested: {operations}")),
        "not every one of the {operations} operations was tested:\n{output}"
    );
    assert!(output.contains(" passed"), "{output}");
    assert!(
        !output.contains("failed") && !output.contains("Errors:"),
        "{output}"
    );
    server.stop();
}
