//! Reaction time of QoS enforcement on a cgroup-v2 kernel, over repeated runs:
//! from the instant a hog starts to the instant the reserved workload is back
//! at ≥ 95 % of its floor. Runs where the floor never dropped count as 0.
//!
//! - cpu: GuaranteedPro (floor 1.5 cores, spinning on 2 CPUs) against a heavier
//!   Burstable stress-ng hog (weight 157 vs 79): only the protection loop's
//!   cpu.max restores the floor.
//! - io: GuaranteedPro reading with direct IO, one fio (floor 60 % of its solo rate)
//!   against a BestEffort fio randread hog: io.weight does nothing without
//!   iocost, the loop's io.max restores the floor.
//! - memory: GuaranteedPro page-cache working set (memory.min) against a
//!   BestEffort allocating hog: the kernel keeps the floor; the lowest working
//!   set is reported.
//!
//! Needs cgroup v2 with every controller, stress-ng and fio, and the VM's disk:
//! `daros-vmtest cargo-test --release --mem 768M --disk-mib 512 -p daros-agent --bench qos_reaction`.
//! Anywhere else it prints SKIPPED. `DAROS_QOS_BENCH_RUNS` (default 10) and
//! `DAROS_QOS_BENCH` (`cpu,io,memory`) select what runs; `DAROS_QOS_BENCH_EVENTS=1`
//! prints the loop's events of each run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{TestRoot, cpu_usec, rbytes, wait_for};
use daros_agent::cgroup::AnyBackend;
use daros_agent::qos::protect::EventKind;
use daros_agent::qos::{QosService, QosSettings, QosSpec, SetTarget};
use daros_agent::sensing::devices::whole_disks;
use daros_coordinator::{Bytes, BytesPerSec, MilliCpu, QosClass, ResourceProfile};

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn spec(class: QosClass, json: &str) -> QosSpec {
    let p: ResourceProfile = serde_json::from_str(json).unwrap();
    QosSpec::new(class, p, "profile").unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

struct Bench {
    t: TestRoot,
    svc: Arc<QosService>,
    _data: tempfile::TempDir,
}

impl Bench {
    fn new(n: usize) -> Self {
        let t = TestRoot::named(&format!("daros-bench-qos-{}-{n}", std::process::id()));
        let data = tempfile::tempdir().unwrap();
        let mut s = QosSettings {
            system_reserved_cpu: MilliCpu(100),
            system_reserved_memory: Bytes::from_mib(128),
            io_read_capacity: Some(BytesPerSec(4 << 30)),
            ..QosSettings::default()
        };
        s.protect.policy.hold_time = Duration::from_secs(1);
        let disks = whole_disks(
            Path::new("/sys/block"),
            &["loop".into(), "ram".into(), "zram".into()],
        );
        let svc = QosService::open(s, t.root.clone(), data.path(), disks).unwrap();
        Bench {
            t,
            svc,
            _data: data,
        }
    }

    fn set(&self, name: &str, class: QosClass, json: &str) {
        self.svc
            .set(
                &format!("managed/{name}"),
                SetTarget::Managed(name.into()),
                spec(class, json),
            )
            .unwrap();
    }

    fn dir(&self, name: &str) -> std::path::PathBuf {
        Path::new("/sys/fs/cgroup").join(self.t.name()).join(name)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.svc.shutdown();
    }
}

/// One run's outcome.
#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    /// Hog start → floor back (0 when it never dropped).
    reaction_ms: f64,
    /// The floor dropped below 95 % at all.
    dipped: bool,
    /// Hog start → the floor first below 95 % (the contention as the
    /// reserved workload feels it).
    dip_ms: Option<f64>,
    /// Hog start → first hold written (from the event), if any.
    hold_ms: Option<f64>,
    /// The loop's own threat → restored time, if reported.
    loop_ms: Option<f64>,
    /// Lowest share of the floor seen (windowed).
    lowest: f64,
    /// Hog start → the hog's own counter first moved (its process start-up
    /// under emulation is part of "hog start"), when sampled.
    contention_ms: Option<f64>,
}

/// The first sample time (ms) at which `hog` (samples of the hog's counter)
/// moved past its first value.
fn first_move(hog: &[(Duration, u64)]) -> Option<f64> {
    let first = hog.first()?.1;
    hog.iter()
        .find(|s| s.1 > first)
        .map(|s| s.0.as_secs_f64() * 1000.0)
}

/// From samples `(t since hog start, counter)`, the reaction: first window end
/// after a dip below 95 % of `floor` (per second) at which the windowed rate is
/// back ≥ 95 % and stays there for `stay`.
fn reaction(
    samples: &[(Duration, u64)],
    window: Duration,
    floor: f64,
    per: f64,
    stay: Duration,
) -> (f64, Option<f64>, f64) {
    let rate = |i: usize| -> Option<(Duration, f64)> {
        let (t, v) = samples[i];
        let j = samples[..i]
            .iter()
            .rposition(|(s, _)| t.saturating_sub(*s) >= window)?;
        let (t0, v0) = samples[j];
        let secs = t.saturating_sub(t0).as_secs_f64();
        Some((t, v.saturating_sub(v0) as f64 / per / secs))
    };
    let rates: Vec<(Duration, f64)> = (0..samples.len()).filter_map(rate).collect();
    let lowest = rates
        .iter()
        .map(|r| r.1 / floor)
        .fold(f64::INFINITY, f64::min);
    let Some(dip) = rates.iter().position(|r| r.1 < 0.95 * floor) else {
        return (0.0, None, lowest);
    };
    let dip_ms = Some(rates[dip].0.as_secs_f64() * 1000.0);
    for (k, &(t, _)) in rates.iter().enumerate().skip(dip) {
        let holds = rates[k..]
            .iter()
            .take_while(|(s, _)| s.saturating_sub(t) <= stay)
            .all(|r| r.1 >= 0.95 * floor);
        let covered = rates.last().is_some_and(|l| l.0.saturating_sub(t) >= stay);
        if holds && covered {
            return (t.as_secs_f64() * 1000.0, dip_ms, lowest);
        }
    }
    (f64::NAN, dip_ms, lowest)
}

/// Waits until the loop holds nothing (the GP's own ramp-up may have caused a
/// hold). False when it never did (a starved VM, or a GP below its own
/// calibrated floor with nothing to hold back): that run is left out and
/// counted, not measured from a state with holds already written.
fn settled(b: &Bench) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = b.svc.shared().status();
        if s.holds.is_empty() && s.levels.values().all(|l| *l == 0) {
            return true;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "{}: the protection loop still holds after 20 s (holds {:?}, levels {:?}): run left out",
                b.t.name(),
                s.holds,
                s.levels
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn loop_times(b: &Bench, t0_ms: u64) -> (Option<f64>, Option<f64>) {
    let mut ev = b.svc.shared().events();
    ev.retain(|e| e.at_unix_ms >= t0_ms);
    if std::env::var_os("DAROS_QOS_BENCH_EVENTS").is_some() {
        for e in &ev {
            println!(
                "    +{:>5} ms {:?} {:?} level {} {}",
                e.at_unix_ms.saturating_sub(t0_ms),
                e.kind,
                e.resource,
                e.level,
                e.detail
            );
        }
    }
    let hold = ev
        .iter()
        .find(|e| e.kind == EventKind::Hold)
        .map(|e| e.at_unix_ms.saturating_sub(t0_ms) as f64);
    let restored = ev
        .iter()
        .find(|e| e.kind == EventKind::Restored)
        .and_then(|e| e.reaction_ms);
    (hold, restored)
}

fn spinners(n: usize) -> String {
    (0..n).map(|_| "while :; do :; done & ").collect::<String>() + "wait"
}

fn run_cpu(n: usize) -> Option<Outcome> {
    let b = Bench::new(n);
    b.set("gp", QosClass::GuaranteedPro, r#"{"cpu":{"request":"2","limit":"2","reservation":"1500m"},"memory":{"request":"64Mi","reservation":"16Mi"}}"#);
    b.set("hog", QosClass::Burstable, r#"{"cpu":{"request":"4"}}"#);
    let gp = b.dir("gp");
    let _gp = b.t.spawn("gp", &spinners(2));
    wait_for("the GP at full speed", Duration::from_secs(30), || {
        let a = cpu_usec(&gp);
        std::thread::sleep(Duration::from_millis(200));
        ((cpu_usec(&gp) - a) as f64 / 200_000.0 >= 1.7).then_some(())
    });
    if !settled(&b) {
        return None;
    }
    let t0_ms = unix_ms();
    let t0 = Instant::now();
    let hog = b.dir("hog");
    let hog0 = cpu_usec(&hog);
    let _hog = b.t.spawn("hog", "exec stress-ng --cpu 8 --timeout 20s -q");
    let (mut samples, mut hog_samples) = (Vec::new(), vec![(Duration::ZERO, hog0)]);
    while t0.elapsed() < Duration::from_millis(2500) {
        samples.push((t0.elapsed(), cpu_usec(&gp)));
        hog_samples.push((t0.elapsed(), cpu_usec(&hog)));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (reaction_ms, dip_ms, lowest) = reaction(
        &samples,
        Duration::from_millis(50),
        1.5,
        1e6,
        Duration::from_millis(300),
    );
    let (hold_ms, loop_ms) = loop_times(&b, t0_ms);
    Some(Outcome {
        reaction_ms,
        dipped: dip_ms.is_some(),
        dip_ms,
        hold_ms,
        loop_ms,
        lowest,
        contention_ms: first_move(&hog_samples),
    })
}

fn disk() -> Option<(String, String)> {
    Some((
        std::env::var("DAROS_VM_DISK_MAJMIN").ok()?,
        std::env::var("DAROS_VM_DISK_MOUNT").ok()?,
    ))
}

fn make_file(path: &Path, mib: u64) {
    if path.metadata().is_ok_and(|m| m.len() >= mib << 20) {
        return;
    }
    let ok = std::process::Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", path.display()),
            "bs=1M",
            &format!("count={mib}"),
            "status=none",
            "conv=fsync",
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "writing {}", path.display());
}

fn run_io(n: usize, dev: &str, mount: &str) -> Option<Outcome> {
    let (gp_file, hog_file) = (
        Path::new(mount).join("bench-gp-io"),
        Path::new(mount).join("bench-hog-io"),
    );
    make_file(&gp_file, 96);
    make_file(&hog_file, 96);
    let b = Bench::new(n);
    b.set(
        "gp",
        QosClass::GuaranteedPro,
        r#"{"cpu":{"request":"1"},"memory":{"request":"64Mi","reservation":"16Mi"}}"#,
    );
    b.set("hog", QosClass::BestEffort, "{}");
    let gp = b.dir("gp");
    // One long-running reader: a dd loop's process start-ups (slow under
    // emulation) made the solo rate, and so the floor, swing by half.
    let _gp = b.t.spawn(
        "gp",
        &format!(
            "exec fio --name=gp --filename={} --rw=read --bs=256k --direct=1 --ioengine=psync --time_based --runtime=600 --output=/dev/null",
            gp_file.display()
        ),
    );
    wait_for("the GP reading", Duration::from_secs(30), || {
        (rbytes(&gp, dev) > 16 << 20).then_some(())
    });
    let a = rbytes(&gp, dev);
    std::thread::sleep(Duration::from_secs(2));
    let solo = (rbytes(&gp, dev) - a) as f64 / 2.0;
    let floor = (solo * 0.6) as u64;
    b.set("gp", QosClass::GuaranteedPro, &format!(r#"{{"cpu":{{"request":"1"}},"memory":{{"request":"64Mi","reservation":"16Mi"}},"io":{{"read":{{"reservation":"{floor}"}}}}}}"#));
    std::thread::sleep(Duration::from_millis(300));
    if !settled(&b) {
        return None;
    }
    let t0_ms = unix_ms();
    let t0 = Instant::now();
    let _hog = b.t.spawn(
        "hog",
        &format!(
            "exec fio --name=hog --filename={} --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=4 --time_based --runtime=20 --group_reporting --output=/dev/null",
            hog_file.display()
        ),
    );
    let mut samples = Vec::new();
    while t0.elapsed() < Duration::from_millis(4000) {
        samples.push((t0.elapsed(), rbytes(&gp, dev)));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (reaction_ms, dip_ms, lowest) = reaction(
        &samples,
        Duration::from_millis(100),
        floor as f64,
        1.0,
        Duration::from_millis(300),
    );
    let (hold_ms, loop_ms) = loop_times(&b, t0_ms);
    Some(Outcome {
        reaction_ms,
        dipped: dip_ms.is_some(),
        dip_ms,
        hold_ms,
        loop_ms,
        lowest,
        contention_ms: None,
    })
}

fn run_memory(n: usize, mount: &str) -> Option<Outcome> {
    const WS: u64 = 200;
    let file = Path::new(mount).join("bench-working-set");
    make_file(&file, WS);
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    let b = Bench::new(n);
    b.set(
        "gp",
        QosClass::GuaranteedPro,
        &format!(
            r#"{{"cpu":{{"request":"1"}},"memory":{{"request":"{}Mi","reservation":"{WS}Mi"}}}}"#,
            WS + 64
        ),
    );
    b.set("hog", QosClass::BestEffort, "{}");
    let gp = b.dir("gp");
    let _gp = b.t.spawn(
        "gp",
        &format!(
            "while :; do cat {} > /dev/null; sleep 0.2; done",
            file.display()
        ),
    );
    let cur = || {
        read(&gp.join("memory.current"))
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while cur() < (WS << 20) * 99 / 100 {
        if Instant::now() >= deadline {
            eprintln!(
                "{}: the working set is not cached after 60 s ({} of {WS} MiB): run left out",
                b.t.name(),
                cur() >> 20
            );
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0_ms = unix_ms();
    let t0 = Instant::now();
    let _hog = b.t.spawn(
        "hog",
        "exec stress-ng --vm 1 --vm-bytes 640M --vm-keep --timeout 40s -q",
    );
    let hog = b.dir("hog");
    let mut samples = Vec::new();
    let floor = (WS << 20) as f64;
    while t0.elapsed() < Duration::from_secs(60) {
        // A level (bytes), not a counter: feed it as a cumulative integral so the
        // same windowed reaction applies.
        samples.push((t0.elapsed(), cur()));
        let oom = read(&hog.join("memory.events"))
            .lines()
            .any(|l| l.starts_with("oom_kill ") && l.trim() != "oom_kill 0");
        if oom {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let lowest = samples
        .iter()
        .map(|s| s.1 as f64 / floor)
        .fold(f64::INFINITY, f64::min);
    let dip = samples.iter().position(|s| (s.1 as f64) < 0.95 * floor);
    let reaction_ms = match dip {
        None => 0.0,
        Some(d) => samples[d..]
            .iter()
            .find(|s| s.1 as f64 >= 0.95 * floor)
            .map_or(f64::NAN, |s| s.0.as_secs_f64() * 1000.0),
    };
    let (hold_ms, loop_ms) = loop_times(&b, t0_ms);
    Some(Outcome {
        reaction_ms,
        dipped: dip.is_some(),
        dip_ms: dip.map(|d| samples[d].0.as_secs_f64() * 1000.0),
        hold_ms,
        loop_ms,
        lowest,
        contention_ms: None,
    })
}

fn stats(mut v: Vec<f64>) -> String {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    format!(
        "median {:6.1}  p95 {:6.1}  max {:6.1}",
        p(0.5),
        p(0.95),
        v[v.len() - 1]
    )
}

fn report(name: &str, what: &str, outs: &[Option<Outcome>], tick_us: f64) {
    let left_out = outs.iter().filter(|o| o.is_none()).count();
    let outs: Vec<&Outcome> = outs.iter().flatten().collect();
    let n = outs.len();
    if left_out > 0 {
        println!(
            "{name}: {left_out} runs left out (its setup did not settle: see the lines above)"
        );
    }
    let dipped = outs.iter().filter(|o| o.dipped).count();
    let never = outs.iter().filter(|o| !o.reaction_ms.is_finite()).count();
    println!(
        "{name}: {n} runs, floor dipped below 95% in {dipped}, not restored within the run in {never}"
    );
    println!(
        "  hog start → floor ≥95% ({what}) ms: {}",
        stats(outs.iter().map(|o| o.reaction_ms).collect())
    );
    println!(
        "  hog start → first hold written ms:    {}",
        stats(outs.iter().filter_map(|o| o.hold_ms).collect())
    );
    let since = |f: fn(&Outcome) -> Option<f64>| -> Vec<f64> {
        outs.iter()
            .filter(|o| o.dipped)
            .filter_map(|o| Some(f(o)? - o.contention_ms?))
            .collect()
    };
    if outs.iter().any(|o| o.contention_ms.is_some()) {
        println!(
            "  hog's own usage first moved ms:       {}",
            stats(outs.iter().filter_map(|o| o.contention_ms).collect())
        );
        println!(
            "  hog's usage moved → first hold ms:    {}",
            stats(since(|o| o.hold_ms))
        );
    }
    println!(
        "  floor below 95% → back ≥95% ms:       {}",
        stats(
            outs.iter()
                .filter_map(|o| Some(o.reaction_ms - o.dip_ms?))
                .filter(|v| v.is_finite())
                .collect()
        )
    );
    println!(
        "  loop: threat seen → restored ms:      {}",
        stats(outs.iter().filter_map(|o| o.loop_ms).collect())
    );
    println!(
        "  lowest share of the floor:            {}",
        stats(outs.iter().map(|o| o.lowest * 100.0).collect())
    );
    if tick_us > 0.0 {
        println!("  protection loop CPU per tick: {tick_us:.0} us");
    }
}

fn main() {
    let v2 = matches!(AnyBackend::detect(), Ok(AnyBackend::V2(_)));
    let tools = ["stress-ng", "fio"].iter().all(|t| {
        std::process::Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some((dev, mount)) = disk().filter(|_| v2 && tools) else {
        println!(
            "SKIPPED: qos_reaction needs cgroup v2, stress-ng, fio and the VM's disk; run it with daros-vmtest cargo-test --release --mem 768M --disk-mib 512 -p daros-agent --bench qos_reaction"
        );
        return;
    };
    let runs: usize = std::env::var("DAROS_QOS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let which = std::env::var("DAROS_QOS_BENCH").unwrap_or_else(|_| "cpu,io,memory".into());
    println!(
        "QoS reaction benchmark: {runs} runs per scenario, {} CPUs, kernel {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        read(Path::new("/proc/sys/kernel/osrelease")).trim()
    );
    let mut n = 0;
    if which.contains("cpu") {
        let mut outs = Vec::new();
        let mut tick = 0.0;
        for _ in 0..runs {
            n += 1;
            outs.push(run_cpu(n));
        }
        // The loop's own cost, measured on a fresh run's status.
        {
            let b = Bench::new(n + 1000);
            b.set("gp", QosClass::GuaranteedPro, r#"{"cpu":{"request":"2","limit":"2","reservation":"1500m"},"memory":{"request":"64Mi","reservation":"16Mi"}}"#);
            std::thread::sleep(Duration::from_secs(3));
            tick = b.svc.shared().status().tick_cost_us.max(tick);
        }
        report(
            "cpu (GuaranteedPro 1.5 cores vs heavier Burstable stress-ng)",
            "50 ms window",
            &outs,
            tick,
        );
    }
    if which.contains("io") {
        let outs: Vec<Option<Outcome>> = (0..runs)
            .map(|_| {
                n += 1;
                run_io(n, &dev, &mount)
            })
            .collect();
        report(
            "io (GuaranteedPro fio sequential direct reads, floor 60% of solo, vs BestEffort fio randread)",
            "100 ms window",
            &outs,
            0.0,
        );
    }
    if which.contains("memory") {
        let outs: Vec<Option<Outcome>> = (0..runs.min(3))
            .map(|_| {
                n += 1;
                run_memory(n, &mount)
            })
            .collect();
        report(
            "memory (GuaranteedPro 200 MiB page cache vs BestEffort allocating 640 MiB)",
            "20 ms samples",
            &outs,
            0.0,
        );
    }
}
