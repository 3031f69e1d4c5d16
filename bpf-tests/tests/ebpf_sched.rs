//! The run-queue programs against the kernel's own accounting: on-CPU time per cgroup from
//! `sched_switch` agrees with the cgroup's `cpu.stat` within 5%, and run-queue waits of a
//! cgroup whose tasks contend for the CPUs are counted and bucketed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ebpf_support;

use std::{process::Command, sync::Mutex, time::Duration};

use daros_ebpf::{SchedDatapath, SchedOptions};
use ebpf_support::{Proc, TestCgroup, TestPins, wait_for};

/// The two tests spin CPUs: run them one at a time so neither starves the other.
static CPU: Mutex<()> = Mutex::new(());

/// Starts `n` busy loops inside `cg` (each moves itself in before spinning).
fn spin(cg: &TestCgroup, n: usize) -> Vec<Proc> {
    let script = format!(
        "echo $$ > {}/cgroup.procs && while :; do :; done",
        cg.path.display()
    );
    (0..n)
        .map(|_| Proc::spawn(Command::new("sh").args(["-c", &script])))
        .collect()
}

/// Freezes the cgroup (cgroup.freeze) and waits until it is: every task has been switched
/// out, so both the programs and cpu.stat have charged all of its time.
fn freeze(cg: &TestCgroup) {
    std::fs::write(cg.path.join("cgroup.freeze"), "1").unwrap();
    wait_for("cgroup frozen", Duration::from_secs(10), || {
        cg.read("cgroup.events").contains("frozen 1").then_some(())
    });
}

#[test]
fn on_cpu_time_matches_cpu_stat_within_5_percent() {
    let _cpu = CPU
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let pins = TestPins::new("sched-oncpu");
    let sched = SchedDatapath::open(&SchedOptions {
        pins: pins.0.clone(),
    })
    .unwrap();
    let cg = TestCgroup::new("sched-oncpu");
    let procs = spin(&cg, 2);
    // every busy loop must have joined the cgroup before we measure
    wait_for("busy loops in the cgroup", Duration::from_secs(10), || {
        (cg.read("cgroup.procs").lines().count() == procs.len()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500)); // the workload runs
    freeze(&cg);
    let stat_ns = cg.cpu_usage_usec() * 1000;
    let ours = sched
        .reader()
        .get(cg.id())
        .unwrap()
        .expect("stats for the cgroup");
    drop(procs);
    let err = (ours.oncpu_ns as f64 - stat_ns as f64).abs() / stat_ns as f64;
    println!(
        "on-CPU: eBPF {} ms, cpu.stat {} ms, difference {:.2}%",
        ours.oncpu_ns / 1_000_000,
        stat_ns / 1_000_000,
        err * 100.0
    );
    // enough CPU time that 5% is far above the scheduler's accounting granularity
    assert!(stat_ns > 200_000_000, "the loops ran: {stat_ns} ns");
    assert!(
        err < 0.05,
        "eBPF {} ns vs cpu.stat {stat_ns} ns",
        ours.oncpu_ns
    );
    assert!(ours.slices > 0);
}

#[test]
fn contending_tasks_show_run_queue_waits() {
    let _cpu = CPU
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let pins = TestPins::new("sched-wait");
    let sched = SchedDatapath::open(&SchedOptions {
        pins: pins.0.clone(),
    })
    .unwrap();
    let cg = TestCgroup::new("sched-wait");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let procs = spin(&cg, 2 * cpus); // twice as many runnable tasks as CPUs: they must queue
    wait_for("busy loops in the cgroup", Duration::from_secs(10), || {
        (cg.read("cgroup.procs").lines().count() == procs.len()).then_some(())
    });
    let before = sched.reader().get(cg.id()).unwrap().unwrap_or_default();
    std::thread::sleep(Duration::from_millis(1000));
    freeze(&cg);
    let s = sched.reader().get(cg.id()).unwrap().unwrap().since(&before);
    drop(procs);
    let hist: u64 = s.wait_hist.iter().sum();
    let mean = s.wait_mean().unwrap();
    println!(
        "waits {} mean {:?} max {} us p99 {:?}",
        s.waits,
        mean,
        s.wait_max_ns / 1000,
        s.wait_quantile(0.99)
    );
    assert!(s.waits > 10, "{s:?}");
    assert_eq!(hist, s.waits, "every wait lands in one histogram bucket");
    // with twice as many spinning tasks as CPUs, a task waits about one slice of another
    assert!(mean > Duration::from_micros(200), "mean wait {mean:?}");
    assert!(s.wait_max_ns >= mean.as_nanos() as u64);
    // the whole CPU time of the cgroup is spread over its slices
    assert!(s.oncpu_ns > 0 && s.slices >= s.waits / 2, "{s:?}");
    // the idle-ish test process's own cgroup is tracked too (every cgroup that runs is)
    assert!(sched.reader().all().unwrap().len() >= 2);
}
