//! ns per packet of the network programs via BPF_PROG_TEST_RUN (the kernel times `repeat`
//! runs of the program on one skb and reports the mean). Cases: an empty program (the cost of
//! the test harness itself), accounting only, accounting + token bucket (conforming), and for
//! information the debt and drop paths. Needs root. Prints one line per case with min / median
//! / max over rounds, then a JSON summary.
//!
//! `cargo bench -p daros-ebpf --bench prog_test_run`
//! (env: `DAROS_BENCH_REPEAT`, default 1000000; `DAROS_BENCH_ROUNDS`, default 15)

use std::time::Duration;

use aya::{EbpfLoader, programs::CgroupSkb};
use daros_ebpf::{
    Cap, CgroupId, CgroupRoot, Direction, NetDatapath, NetLimits, NetOptions, PinDir,
    net::{ipv4_tcp_packet, run_program},
    objects,
};

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return Ok(()); // test harness probing
    }
    anyhow::ensure!(
        rustix::process::geteuid().is_root(),
        "the benchmark loads BPF programs: run it as root"
    );
    // `cargo bench` passes --bench; `cargo test --benches` does not: then a quick smoke run.
    let full = args.iter().any(|a| a == "--bench");
    let repeat = env_u32("DAROS_BENCH_REPEAT", if full { 1_000_000 } else { 1000 });
    let rounds = env_u32("DAROS_BENCH_ROUNDS", if full { 15 } else { 1 });
    let pins = PinDir::new(format!("/sys/fs/bpf/daros-bench-{}", std::process::id()));
    let result = bench(&pins, repeat, rounds);
    pins.remove_all()?;
    result
}

fn bench(pins: &PinDir, repeat: u32, rounds: u32) -> anyhow::Result<()> {
    let packet = ipv4_tcp_packet(1448, false);
    let mut net = NetDatapath::open(&NetOptions {
        pins: pins.clone(),
        max_slots: 1024,
    })?;
    // BPF_PROG_TEST_RUN gives the skb a socket in the caller's cgroup: register that one.
    let root = CgroupRoot::detect()?;
    let me = CgroupId::of_path(&root.current()?)?;

    let mut noop_obj = EbpfLoader::new().load(objects::noop())?;
    let noop: &mut CgroupSkb = noop_obj
        .program_mut("cg_noop")
        .ok_or_else(|| anyhow::anyhow!("cg_noop missing"))?
        .try_into()?;
    noop.load()?;

    let mut results = Vec::new();
    let mut measure = |name: &str,
                       f: &mut dyn FnMut() -> anyhow::Result<Duration>|
     -> anyhow::Result<()> {
        f()?; // warm-up
        let mut ns = Vec::new();
        for _ in 0..rounds {
            ns.push(f()?.as_nanos() as f64);
        }
        let (min, med, max) = stats(ns);
        println!(
            "{name:<28} min {min:>5.0} ns  median {med:>5.0} ns  max {max:>5.0} ns  ({rounds} rounds x {repeat} runs)"
        );
        results.push(
            serde_json::json!({"case": name, "min_ns": min, "median_ns": med, "max_ns": max}),
        );
        Ok(())
    };

    measure("empty program", &mut || {
        Ok(run_program(noop, &packet, repeat, "cg_noop")?.per_run)
    })?;
    measure("unregistered cgroup", &mut || {
        Ok(net.test_run(Direction::Egress, &packet, repeat)?.per_run)
    })?;
    net.set_workload(me, &NetLimits::accounting())?;
    measure("accounting", &mut || {
        Ok(net.test_run(Direction::Egress, &packet, repeat)?.per_run)
    })?;
    let huge = NetLimits {
        egress: Some(Cap::rate(daros_ebpf::bucket::MAX_RATE_BPS)),
        ..NetLimits::default()
    };
    net.set_workload(me, &huge)?;
    measure("accounting + bucket", &mut || {
        Ok(net.test_run(Direction::Egress, &packet, repeat)?.per_run)
    })?;
    let tiny = NetLimits {
        egress: Some(Cap::rate(daros_ebpf::bucket::MIN_RATE_BPS)),
        ..NetLimits::default()
    };
    net.set_workload(me, &tiny)?;
    measure("bucket, over (drop+CN)", &mut || {
        Ok(net.test_run(Direction::Egress, &packet, repeat)?.per_run)
    })?;
    println!(
        "{}",
        serde_json::json!({"bench": "prog_test_run", "repeat": repeat, "results": results})
    );
    Ok(())
}
