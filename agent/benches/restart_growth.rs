//! A real darosd's restart under a growing history (issue 20): applies
//! `DAROS_RESTART_CHANGES` (default 20,000) spec changes through the API
//! socket (20 applications, admitted and not started), and every fifth of
//! the way kills it with SIGKILL, starts it again on the same data dir and
//! times restart-to-ready: from the new process to `GET /v1/apps` answering,
//! which must list the same applications at the same versions and phases as
//! before the kill (asserted). Also printed: the data dir's size.
//!
//! Needs root (darosd's managed cgroup root):
//! `cargo bench -p daros-agent --bench restart_growth`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{RestartableDarosd, TestRoot};
use daros_agent::client::Client;
use hyper::Method;
use serde_json::Value;

fn app(i: u64, n: u64) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app-{i}, tenant: bench}}\nspec:\n  \
         workloads:\n    - {{name: web, runtime: {{type: process}}, \
         resources: {{cpu: {{request: 10m}}, memory: {{request: 8Mi}}}}, \
         runtimeSpec: {{command: /bin/true, env: {{N: \"{n}\"}}}}}}\n"
    )
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// (name, phase, version) of every application, once the API answers.
fn apps(rt: &tokio::runtime::Runtime, c: &Client) -> Option<Vec<(String, String, u64)>> {
    let v: Value = rt.block_on(c.get("/v1/apps")).ok()?;
    let mut out: Vec<(String, String, u64)> = v
        .as_array()?
        .iter()
        .map(|a| {
            (
                a["app"].as_str().unwrap_or_default().to_string(),
                a["phase"].as_str().unwrap_or_default().to_string(),
                a["version"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    Some(out)
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: needs root");
        return;
    }
    let total: u64 = std::env::var("DAROS_RESTART_CHANGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let t = TestRoot::new("restart-growth");
    let dir = tempfile::tempdir().unwrap();
    let mut d = RestartableDarosd::new(dir.path(), t.name(), "restart-growth", &[], &[]);
    d.spawn_serving();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = Client::new(&d.socket);
    let wait_ready = |c: &Client| loop {
        if let Some(a) = apps(&rt, c) {
            return a;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let tenant = "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: bench}\nspec:\n  \
                  quota: {cpu: \"64\", memory: 256Gi, maxApplications: 100, maxConcurrentWorkloads: 1000}\n";
    // The first write waits for the one-member cluster's leader.
    loop {
        let r: Result<Value, _> =
            rt.block_on(c.send_text(Method::POST, "/v1/apps", tenant.to_string()));
        if r.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("| changes | data dir | restart to ready (get apps answers, same apps) |");
    println!("|---:|---:|---:|");
    let step = (total / 5).max(1);
    let t0 = Instant::now();
    for n in 1..=total {
        let _: Value = rt
            .block_on(c.send_text(Method::POST, "/v1/apps?start=false", app(n % 20, n)))
            .unwrap_or_else(|e| panic!("change {n}: {e}\n{}", d.log()));
        if n % step == 0 {
            let before = wait_ready(&c);
            d.kill9();
            let size = dir_size(&d.dir.join("data"));
            let t1 = Instant::now();
            d.spawn();
            let after = wait_ready(&c);
            let ready = t1.elapsed();
            assert_eq!(
                after, before,
                "the restarted server lists other applications"
            );
            println!(
                "| {n} | {:.1} MiB | {} ms |",
                size as f64 / 1048576.0,
                ready.as_millis()
            );
        }
    }
    println!(
        "\n{total} changes through the socket in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
