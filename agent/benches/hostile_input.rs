//! A real darosd under hostile clients (issue 23), timed from the client's
//! side of the unix socket:
//! 1. eight specs at once, four YAML nested 50,000 deep (100 KB) and four
//!    nested to the 1 MiB size limit: the time each is refused (target
//!    < 100 ms) and `/healthz` probed every 5 ms meanwhile (target < 50 ms);
//! 2. 300 connections dripping their request head: all closed by
//!    `api.header_timeout` (2 s here), `/healthz` meanwhile;
//! 3. 20 bodies of 2.7 MB: darosd's resident memory before and after.
//!
//! Needs root (darosd's managed cgroup root):
//! `sudo cargo bench -p daros-agent --bench hostile_input`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::raw_http::{exchange, healthz, post};
use common::{Daemon, TestRoot};

/// `/healthz` every 5 ms until `stop`: the slowest answer and how many.
fn probe(socket: &Path, stop: &AtomicBool) -> (Duration, usize) {
    let (mut worst, mut n) = (Duration::ZERO, 0);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let (status, body) = healthz(socket);
        assert_eq!(status, 200, "{body}");
        worst = worst.max(t.elapsed());
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    (worst, n)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: needs root");
        return;
    }
    let t = TestRoot::new("hostile");
    let d = Daemon::start(t.name(), &[], &[("DAROS_API_HEADER_TIMEOUT", "2s")]);
    let socket = d.socket.clone();
    assert_eq!(healthz(&socket).0, 200);
    let mut failed = Vec::new();

    // 1. Nested specs, eight at once.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (socket, stop) = (socket.clone(), Arc::clone(&stop));
        std::thread::spawn(move || probe(&socket, &stop))
    };
    let senders: Vec<_> = (0..8)
        .map(|i| {
            let socket = socket.clone();
            let len = if i % 2 == 0 { 50_000 } else { (1 << 20) - 3 };
            let mut b = b"a: ".to_vec();
            b.extend(std::iter::repeat_n(b'[', len));
            let req = post("/v1/apps", &b);
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let (status, body) = exchange(&socket, &req);
                assert_eq!(status, 400, "{body}");
                assert!(body.contains("nesting deeper than 64 levels"), "{body}");
                (len, t0.elapsed())
            })
        })
        .collect();
    let refusals: Vec<(usize, Duration)> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (worst_health, probes) = prober.join().unwrap();
    let worst_refusal = refusals.iter().map(|r| r.1).max().unwrap();
    for (len, took) in &refusals {
        println!("nested {len} levels: refused in {}", ms(*took));
    }
    println!(
        "8 nested specs at once: slowest refusal {} (target < 100 ms); /healthz slowest {} over {probes} probes (target < 50 ms)",
        ms(worst_refusal),
        ms(worst_health)
    );
    if worst_refusal >= Duration::from_millis(100) {
        failed.push(format!("refusal {}", ms(worst_refusal)));
    }
    if worst_health >= Duration::from_millis(50) {
        failed.push(format!("healthz {}", ms(worst_health)));
    }

    // 2. 300 dripping heads.
    let t0 = Instant::now();
    let mut conns: Vec<UnixStream> = (0..300)
        .map(|_| {
            let mut s = UnixStream::connect(&socket).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: darosd\r\nX-Drip: ")
                .unwrap();
            s
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (socket, stop) = (socket.clone(), Arc::clone(&stop));
        std::thread::spawn(move || probe(&socket, &stop))
    };
    let mut open = conns.len();
    while open > 0 && t0.elapsed() < Duration::from_secs(20) {
        open = 0;
        for s in &mut conns {
            if s.write_all(b"a").is_ok() {
                open += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let closed_after = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (worst_health, probes) = prober.join().unwrap();
    let mut answered = 0;
    for s in &mut conns {
        let mut rest = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        if s.read_to_end(&mut rest).is_ok() && !rest.is_empty() {
            answered += 1;
        }
    }
    println!(
        "300 dripping heads: {} still open after {:.2} s (header timeout 2 s), {answered} answered; /healthz slowest {} over {probes} probes",
        open,
        closed_after.as_secs_f64(),
        ms(worst_health)
    );
    if open > 0 {
        failed.push(format!("{open} dripping connections still open"));
    }

    // 3. Oversized bodies.
    let pid = d.child.id();
    let before = rss_kib(pid);
    let big = post("/v1/apps", &vec![b'a'; 2_700_000]);
    for _ in 0..20 {
        let (status, body) = exchange(&socket, &big);
        assert_eq!(status, 413, "{body}");
    }
    let after = rss_kib(pid);
    println!(
        "20 bodies of 2.7 MB: 413 each; darosd RSS {:.1} MiB before, {:.1} MiB after",
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    assert!(failed.is_empty(), "targets missed: {failed:?}");
}
