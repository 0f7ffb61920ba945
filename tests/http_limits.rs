//! The REST server's read limits through the real binary and its config keys: a request body
//! that trickles in is answered 408 after `[server] body_timeout_ms`, and a request head that
//! trickles in is cut off after `header_timeout_ms`, while prompt clients are served.

mod util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use util::{Server, TEST_API_KEY, get};

/// Reads until the server closes the connection or 10 s pass.
fn read_until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn slow_request_heads_and_bodies_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(
        &config,
        format!("{example}\n[server]\nbody_timeout_ms = 400\nheader_timeout_ms = 800\n"),
    )
    .unwrap();
    let server = Server::start(
        &["--config", config.to_str().unwrap(), "serve"],
        &dir.path().join("data"),
        &[],
    );
    let addr = server.base.trim_start_matches("http://").to_string();

    // A body promised at 200 bytes, 20 sent, then nothing: 408 naming the body.
    let mut slow_body = TcpStream::connect(&addr).unwrap();
    let head = format!(
        "PUT /v1/tables/user/rows/u1 HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {TEST_API_KEY}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n"
    );
    slow_body.write_all(head.as_bytes()).unwrap();
    slow_body.write_all(b"{\"cells\": {\"info:city").unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    slow_body
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while !String::from_utf8_lossy(&answer).contains("request_timeout") {
        let n = slow_body.read(&mut chunk).expect("an answer before 10 s");
        assert!(
            n > 0,
            "closed without an answer: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&chunk[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"field\":\"body\""), "{answer}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );

    // A head trickled in: the connection is closed, no request is handled.
    let mut slow_head = TcpStream::connect(&addr).unwrap();
    slow_head
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: te")
        .unwrap();
    let (received, took) = read_until_closed(&mut slow_head);
    assert!(
        received.is_empty() || received.starts_with("HTTP/1.1 408"),
        "{received}"
    );
    assert!(took < Duration::from_secs(5), "closed after {took:?}");

    // Prompt clients are served as before.
    let (status, _) = get(&server.url("/v1/tables"));
    assert_eq!(status, 200);
}
