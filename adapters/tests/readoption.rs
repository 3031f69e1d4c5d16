//! An agent killed with SIGKILL and started again on the same state
//! directory adopts the running workloads without restarting them: same
//! pids, logs that kept flowing, and exits (even one that happened while
//! no agent ran) reported with their real exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::agent::{Agent, supervisor_bin};
use common::*;
use daros_adapters::placement::Placement;
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, RestartPolicy};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn write_spec(dir: &Path, name: &str, script: String, placement: Placement) -> std::path::PathBuf {
    let mut s = spec(name, sh(&script), placement);
    s.lifecycle = LifecyclePolicy {
        restart: RestartPolicy::Never,
        ..LifecyclePolicy::default()
    };
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, serde_json::to_vec(&s).unwrap()).unwrap();
    p
}

fn ticks(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once(" stdout F tick ")
                .map(|(_, n)| n.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_restarted_agent_adopts_running_workloads_after_kill_9() {
    let state = TestState::new();
    let work = tempfile::tempdir().unwrap();
    let cg = TestCgroups::create("adopt");
    let cg2 = TestCgroups::create("adopt-waiter");
    let quit = work.path().join("quit");
    let quit2 = work.path().join("quit2");
    let ticker = write_spec(
        work.path(),
        "ticker",
        format!(
            "i=0; while [ ! -f {q} ]; do i=$((i+1)); echo tick $i; sleep 0.05; done; echo bye; exit 7",
            q = quit.display()
        ),
        Placement {
            cgroup: cg.placement(),
            ..Placement::default()
        },
    );
    let waiter = write_spec(
        work.path(),
        "waiter",
        format!(
            "while [ ! -f {q} ]; do sleep 0.05; done; exit 5",
            q = quit2.display()
        ),
        // Its own cgroups too: their guard kills the workload even when the
        // test fails (workloads outlive agents by design).
        Placement {
            cgroup: cg2.placement(),
            ..Placement::default()
        },
    );
    let (t_id, w_id) = (
        "process:daros-test.app.ticker.0",
        "process:daros-test.app.waiter.0",
    );
    let bin = supervisor_bin();

    let mut first = Agent::start(&bin, state.path(), &shim_path(), &[ticker, waiter]);
    let t_pid = first.wait_event(t_id, "started")["pid"].as_u64().unwrap() as u32;
    let w_pid = first.wait_event(w_id, "started")["pid"].as_u64().unwrap() as u32;
    cg.assert_member(t_pid);
    let log = state.path().join("logs/daros-test.app.ticker.0/output.log");
    wait_until(Duration::from_secs(10), "first ticks", || {
        ticks(&log).len() >= 3
    })
    .await_blocking();

    first.kill9();
    assert!(
        alive(t_pid) && alive(w_pid),
        "workloads survive the agent's SIGKILL"
    );
    // Logs keep flowing while no agent runs.
    let before = ticks(&log).len();
    wait_until(Duration::from_secs(10), "ticks without an agent", || {
        ticks(&log).len() >= before + 10
    })
    .await_blocking();
    // One workload ends while no agent watches: its shim records the exit.
    std::fs::write(&quit2, "").unwrap();
    let exit_file = state.path().join("run/daros-test.app.waiter.0/1/exit.json");
    wait_until(Duration::from_secs(10), "the waiter's exit record", || {
        exit_file.exists()
    })
    .await_blocking();
    assert!(!alive(w_pid));

    let mut second = Agent::start(&bin, state.path(), &shim_path(), &[]);
    let adopted = second.wait_event(t_id, "adopted");
    assert_eq!(
        adopted["pid"],
        json!(t_pid),
        "the same process, not a restart"
    );
    assert_eq!(adopted["generation"], json!(1));
    let exited = second.wait_event(w_id, "exited");
    assert_eq!(
        exited["exit"],
        json!({"code": 5}),
        "the exit missed by the agent is reported with its code"
    );
    let failed = second.wait_event(w_id, "failed");
    assert_eq!(failed["failure"]["runtime"]["kind"], "processExit");
    // (the coordinator serialises this field in snake_case)
    assert_eq!(failed["failure"]["runtime"]["exit_code"], 5);
    second.wait_event(w_id, "gaveUp");
    assert!(
        !second
            .seen
            .iter()
            .any(|v| v["event"]["id"] == t_id && v["event"]["kind"] == "started")
    );

    let st = second.command(&format!("inspect {t_id}"));
    assert_eq!(st["status"]["state"], "Running");
    assert_eq!(st["status"]["detail"]["pid"], json!(t_pid));
    cg.assert_member(t_pid);

    // A later exit is observed by the new agent with its real code.
    std::fs::write(&quit, "").unwrap();
    let exited = second.wait_event(t_id, "exited");
    assert_eq!(exited["exit"], json!({"code": 7}));
    let all = ticks(&log);
    let want: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(all, want, "no tick lost across the agent restart");
    let last = second.command(&format!("logs {t_id} 1"));
    assert_eq!(last["logs"][0]["text"], "bye");

    for id in [t_id, w_id] {
        assert_eq!(second.command(&format!("destroy {id}"))["destroyed"], id);
    }
    assert!(!alive(t_pid));
    assert!(cg.pids().is_empty() && cg2.pids().is_empty());
}

/// Runs an async wait on a small runtime from a synchronous test.
trait Blocking {
    fn await_blocking(self);
}

impl<F: std::future::Future<Output = ()>> Blocking for F {
    fn await_blocking(self) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(self);
    }
}
