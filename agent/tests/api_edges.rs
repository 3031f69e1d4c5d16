//! The API's edges under hostile or broken clients (issue 23), against a real
//! darosd on a real unix socket, spoken to byte by byte: what a client sees
//! on the wire (status line and body), and that the agent goes on answering.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::raw_http::{exchange, healthz, post, read_answer};
use common::{Daemon, TestRoot};
use daros_agent::api::error::ErrorBody;

fn json_error(answer: (u16, String), status: u16) -> ErrorBody {
    assert_eq!(answer.0, status, "{}", answer.1);
    let e: ErrorBody = serde_json::from_str(&answer.1)
        .unwrap_or_else(|_| panic!("a JSON error body for {status}, got {:?}", answer.1));
    assert_eq!(e.status, status);
    assert!(!e.error.is_empty());
    e
}

fn daemon(tag: &str) -> (TestRoot, Daemon) {
    let t = TestRoot::new(tag);
    let d = Daemon::start(
        t.name(),
        &[],
        &[
            ("DAROS_API_HEADER_TIMEOUT", "2s"),
            ("DAROS_API_BODY_TIMEOUT", "2s"),
        ],
    );
    (t, d)
}

/// Every status a client can provoke, from hyper's parser to the handlers,
/// comes with the same JSON body; no Rust type name reaches the user.
#[test]
fn every_error_status_has_a_json_body() {
    let (_t, d) = daemon("edge-json");
    let s = &d.socket;
    let e = json_error(exchange(s, b"NOT AN HTTP REQUEST\r\n\r\n"), 400);
    assert!(e.error.contains("not valid HTTP/1.1"), "{}", e.error);
    let mut big = b"GET /healthz HTTP/1.1\r\nHost: darosd\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 70_000));
    big.extend_from_slice(b"\r\n\r\n");
    let e = json_error(exchange(s, &big), 431);
    assert!(e.error.contains("65536 bytes"), "{}", e.error);
    let e = json_error(
        exchange(s, &post("/v1/apps", &vec![b'a'; (1 << 20) + 1])),
        413,
    );
    assert!(e.error.contains("1048576 bytes"), "{}", e.error);
    json_error(
        exchange(
            s,
            b"GET /v1/nope HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
        ),
        404,
    );
    json_error(
        exchange(
            s,
            b"DELETE /healthz HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
        ),
        405,
    );
    let bad_type = b"apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: x, tenant: t}\nspec:\n  workloads:\n    - name: w\n      replicas: many\n      runtime: {type: process}\n      runtimeSpec: {command: /bin/true}\n";
    let e = json_error(exchange(s, &post("/v1/apps", bad_type)), 400);
    assert!(e.error.contains("replicas"), "{}", e.error);
    assert!(
        !e.error.contains("u32") && !e.error.contains("struct "),
        "{}",
        e.error
    );
    assert_eq!(healthz(s).0, 200);
}

/// A client that drips its request head is cut off after
/// `api.header_timeout`; one that drips its body gets 408 after
/// `api.body_timeout`; the agent answers others meanwhile.
#[test]
fn slow_clients_are_cut_off() {
    let (_t, d) = daemon("edge-slow");
    let mut head = UnixStream::connect(&d.socket).unwrap();
    head.write_all(b"GET /healthz HTTP/1.1\r\nHost: darosd\r\n")
        .unwrap();
    let mut drip = head.try_clone().unwrap();
    let t0 = Instant::now();
    let dripper = std::thread::spawn(move || {
        // One header byte every 200 ms, until the server closes.
        for i in 0..150 {
            if drip.write_all(&[b'a' + (i % 26) as u8]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut body = UnixStream::connect(&d.socket).unwrap();
    body.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let req = post("/v1/apps", &[b'x'; 100]);
    body.write_all(&req[..req.len() - 90]).unwrap();
    assert_eq!(healthz(&d.socket).0, 200, "the agent answers meanwhile");

    let e = json_error(read_answer(&mut body), 408);
    assert!(e.error.contains("api.body_timeout"), "{}", e.error);
    head.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let closed = match head.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let after = t0.elapsed();
    eprintln!("dripping head closed after {after:?} (api.header_timeout 2s)");
    assert!(closed, "the dripping connection was closed");
    assert!(rest.is_empty(), "no answer to a request never completed");
    assert!(
        after >= Duration::from_secs(2),
        "closed by the header timeout, not before: {after:?}"
    );
    dripper.join().unwrap();
    assert_eq!(healthz(&d.socket).0, 200);
}

/// Eight hostile specs at once — YAML nested 50,000 deep and nested to the
/// size limit — are all refused with 400, and `/healthz` answers while they
/// are in flight (the timings are a bench: `hostile_input`).
#[test]
fn nested_specs_are_refused_while_the_agent_answers() {
    let (_t, d) = daemon("edge-nest");
    let socket = d.socket.clone();
    let mut specs = Vec::new();
    for i in 0..8 {
        let mut b = b"a: ".to_vec();
        let len = if i % 2 == 0 { 50_000 } else { (1 << 20) - 3 };
        b.extend(std::iter::repeat_n(b'[', len));
        specs.push(b);
    }
    let senders: Vec<_> = specs
        .into_iter()
        .map(|b| {
            let socket = socket.clone();
            std::thread::spawn(move || exchange(&socket, &post("/v1/apps", &b)))
        })
        .collect();
    let h = healthz(&socket);
    assert_eq!(h.0, 200, "{}", h.1);
    for s in senders {
        let e = json_error(s.join().unwrap(), 400);
        assert!(
            e.error.contains("nesting deeper than 64 levels"),
            "{}",
            e.error
        );
    }
}
