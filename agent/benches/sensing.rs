//! Agent sensing benchmark: the real darosd binary (release build) samples 150
//! workload cgroups, each holding a real process, at 1 s; prints the agent's
//! average CPU use (from /proc/<pid>/stat) and peak RSS (VmHWM).
//!
//! Run: `sudo cargo bench -p daros-agent --bench sensing`
//! (`DAROS_BENCH_WORKLOADS`, `DAROS_BENCH_SECONDS` change the defaults 150 / 60).
//! Creates `daros-bench-*` cgroups and removes them, with their processes, at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestRoot, wait_for};
use daros_agent::cgroup::CgroupBackend;
use daros_agent::client::Client;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may contain spaces) start after ") ".
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / rustix::param::clock_ticks_per_second() as f64
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn main() {
    // `cargo bench` passes --bench; a plain `cargo test` build passes nothing we need.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_or("DAROS_BENCH_WORKLOADS", 150) as usize;
    let secs = env_or("DAROS_BENCH_SECONDS", 60);
    let t = TestRoot::named(&format!("daros-bench-{}", std::process::id()));
    println!(
        "creating {n} workload cgroups under {} with one process each",
        t.root.path()
    );
    let mut procs = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("w{i:03}");
        t.workload(&name);
        procs.push(t.spawn(&name, "sleep 3600"));
    }

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_darosd"));
    // DAROS_* variables are darosd configuration; the bench's own must not leak in.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DAROS_")) {
        cmd.env_remove(k);
    }
    let mut daemon = cmd
        .arg("--socket")
        .arg(&socket)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args([
            "--managed-root",
            t.name(),
            "--interval",
            "1s",
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start darosd");
    let pid = daemon.id();
    let client = Client::new(&socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    wait_for(
        "darosd to sample every workload",
        Duration::from_secs(60),
        || {
            let list = rt.block_on(client.workloads(None)).ok()?;
            (list.workloads.iter().filter(|w| w.managed).count() >= n).then_some(())
        },
    );
    println!(
        "darosd pid {pid} sees {n} workloads after {:.1}s; warming up 5s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));

    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap();
    let cpu0 = cpu_seconds(pid);
    let node0 = rt.block_on(client.node()).unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let cpu1 = cpu_seconds(pid);
    let wall = t0.elapsed().as_secs_f64();
    let node1 = rt.block_on(client.node()).unwrap();
    let hwm = status_kib(pid, "VmHWM:");
    let rss = status_kib(pid, "VmRSS:");
    let list = rt.block_on(client.workloads(None)).unwrap();
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap();

    let cores = (cpu1 - cpu0) / wall;
    let ticks = node1.agent.samples_total - node0.agent.samples_total;
    println!("--- agent sensing benchmark ---");
    println!(
        "workloads sampled        {}",
        list.workloads.iter().filter(|w| w.managed).count()
    );
    println!("cgroup mode              {}", t.backend().mode());
    println!("measured                 {wall:.1} s, {ticks} ticks at 1 s");
    println!("agent CPU time           {:.3} s", cpu1 - cpu0);
    println!("agent CPU, average       {cores:.4} cores (target <= 0.02)");
    println!(
        "agent peak RSS (VmHWM)   {:.1} MiB (target <= 40)",
        hwm as f64 / 1024.0
    );
    println!("agent RSS at end         {:.1} MiB", rss as f64 / 1024.0);
    println!(
        "last tick duration       {:.2} ms",
        node1.agent.last_sample_duration_us as f64 / 1000.0
    );
    println!(
        "sample errors            {}",
        node1.agent.sample_errors_total - node0.agent.sample_errors_total
    );
    println!(
        "loadavg before / after   {} / {}",
        load_before.trim(),
        load_after.trim()
    );

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let _ = daemon.wait();
    drop(procs);
    drop(t);
    let verdict = cores <= 0.02 && hwm as f64 / 1024.0 <= 40.0;
    println!(
        "result                   {}",
        if verdict {
            "within target"
        } else {
            "OVER TARGET"
        }
    );
}
