//! The process runtime with real processes, real cgroups (v1 hierarchies
//! and the cgroup2 mount of this host, under `daros-test-*`), real log
//! files and real servers for the health checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use daros_adapters::AdapterError;
use daros_adapters::adapter::{DestroyOptions, LogQuery, RuntimeAdapter};
use daros_adapters::event::RuntimeEventKind as K;
use daros_adapters::placement::Placement;
use daros_adapters::status::{InstanceState, RuntimeDetail};
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::health::{CheckKind, ExecProbe, HealthCheck, HttpProbe, TcpProbe};
use daros_coordinator::model::lifecycle_policy::{
    Backoff, LifecyclePolicy, OnExhausted, RestartPolicy,
};
use daros_coordinator::model::time::DurationMs;
use futures::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn pid_of(st: &daros_adapters::WorkloadStatus) -> u32 {
    match &st.detail {
        RuntimeDetail::Process { pid: Some(p), .. } => *p,
        other => panic!("no pid in {other:?}"),
    }
}

#[tokio::test]
async fn starts_in_its_cgroups_as_its_user_with_env_and_directory() {
    let state = TestState::new();
    let cg = TestCgroups::create("start");
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec(
        "identity",
        json!({
            "command": "/bin/sh",
            "args": ["-c", "echo \"who=$(id -u):$(id -g) dir=$(pwd) w=$DAROS_WORKLOAD g=$GREETING\"; exec sleep 60"],
            "env": {"GREETING": "hello"},
            "workingDir": "/tmp",
            "user": "nobody",
        }),
        Placement {
            cgroup: cg.placement(),
            oom_score_adj: Some(500),
            ..Placement::default()
        },
    );
    s.image = Some("/bin/sh".into());
    let id = adapter.create(&s).await.unwrap();
    assert_eq!(id.to_string(), "process:daros-test.app.identity.0");
    // Creating the same instance again is idempotent; a different spec is a conflict.
    assert_eq!(adapter.create(&s).await.unwrap(), id);
    let mut other = s.clone();
    other.runtime_spec.value_mut()["args"] = json!(["-c", "true"]);
    assert!(matches!(
        adapter.create(&other).await,
        Err(AdapterError::Conflict(_))
    ));
    assert_eq!(
        adapter.inspect(&id).await.unwrap().state,
        InstanceState::Created
    );

    adapter.start(&id).await.unwrap();
    let (started, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    let K::Started {
        pid: Some(pid),
        generation: 1,
    } = started.kind
    else {
        panic!("{started:?}")
    };
    let st = adapter.inspect(&id).await.unwrap();
    assert_eq!(st.state, InstanceState::Running);
    assert!(st.ready, "no readiness checks: ready when running");
    assert_eq!(pid_of(&st), pid);
    cg.assert_member(pid);
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .unwrap()
            .trim(),
        "500"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "{status}"
    );
    // The shim is not in the workload's cgroups and not our child.
    let RuntimeDetail::Process {
        shim_pid: Some(shim),
        ..
    } = st.detail
    else {
        panic!()
    };
    assert!(!cg.pids().contains(&shim));
    let stat = std::fs::read_to_string(format!("/proc/{shim}/stat")).unwrap();
    let ppid: u32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(
        ppid,
        std::process::id(),
        "the shim is detached from the agent"
    );

    wait_until(T, "the first log line", || {
        std::fs::read_to_string(
            state
                .path()
                .join("logs/daros-test.app.identity.0/output.log"),
        )
        .is_ok_and(|l| l.contains("w=identity"))
    })
    .await;
    let lines = adapter
        .logs(&id, LogQuery { tail: Some(10) })
        .await
        .unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].text, "who=65534:65534 dir=/tmp w=identity g=hello");

    adapter
        .destroy(
            &id,
            DestroyOptions {
                grace: Duration::from_secs(2),
                remove_logs: true,
            },
        )
        .await
        .unwrap();
    assert!(!alive(pid));
    assert!(cg.pids().is_empty(), "nothing left in the cgroups");
    assert!(!state.path().join("logs/daros-test.app.identity.0").exists());
    assert!(matches!(
        adapter.inspect(&id).await,
        Err(AdapterError::NotFound(_))
    ));
}

#[tokio::test]
async fn logs_rotate_and_follow_sees_new_lines() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let s = spec(
        "chatty",
        json!({
            "command": "/bin/sh",
            "args": ["-c", "i=0; while true; do i=$((i+1)); echo \"line $i\"; echo \"err $i\" >&2; sleep 0.005; done"],
            "logs": {"maxSize": "4Ki", "maxFiles": 3},
        }),
        Placement::default(),
    );
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    let dir = adapter.log_dir(&id);
    wait_until(T, "two rotations", || dir.join("output.log.2").exists()).await;
    assert!(
        !dir.join("output.log.3").exists(),
        "maxFiles 3 keeps .1 and .2 only"
    );
    for f in ["output.log", "output.log.1", "output.log.2"] {
        assert!(
            std::fs::metadata(dir.join(f)).unwrap().len() <= 4096,
            "{f} over maxSize"
        );
    }

    // The tail spans files and is contiguous.
    let tail = adapter
        .logs(&id, LogQuery { tail: Some(40) })
        .await
        .unwrap();
    assert_eq!(tail.len(), 40);
    let nums: Vec<u64> = tail
        .iter()
        .filter(|l| l.stream == daros_adapters::logs::OutputStream::Stdout)
        .map(|l| l.text.strip_prefix("line ").unwrap().parse().unwrap())
        .collect();
    assert!(nums.windows(2).all(|w| w[1] == w[0] + 1), "{nums:?}");

    // Following from the end sees lines written later, across rotations.
    let mut follow = adapter.follow_logs(&id, 1).await.unwrap();
    let first = follow.next().await.unwrap().unwrap();
    let mut last = 0u64;
    let deadline = Instant::now() + T;
    let mut seen = 0;
    while seen < 400 {
        assert!(
            Instant::now() < deadline,
            "follow stalled after {seen} lines"
        );
        let l = tokio::time::timeout(T, follow.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(n) = l.text.strip_prefix("line ") {
            let n: u64 = n.parse().unwrap();
            if last != 0 {
                assert_eq!(n, last + 1, "follow skipped or repeated a line");
            }
            last = n;
            seen += 1;
        }
    }
    assert!(last > 400, "first followed line was {first:?}");
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}

fn check(name: &str, kind: CheckKind) -> HealthCheck {
    HealthCheck {
        name: name.into(),
        kind,
        exec: None,
        http: None,
        tcp: None,
        period: DurationMs(200),
        timeout: DurationMs(200),
        failure_threshold: 2,
        initial_delay: DurationMs(0),
    }
}

struct Server(std::process::Child);
impl Server {
    fn start(port: u16, root: &std::path::Path) -> Self {
        Self(
            std::process::Command::new("busybox")
                .args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
                .arg(root)
                .spawn()
                .unwrap(),
        )
    }
}
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn exec_http_and_tcp_checks_flip_ready_and_unready() {
    let state = TestState::new();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "ok").unwrap();
    let flag = www.path().join("healthy");
    let port = free_port();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec("checked", sh("exec sleep 120"), Placement::default());
    let mut page = check("page", CheckKind::Readiness);
    page.http = Some(HttpProbe {
        port,
        path: "/index.html".into(),
    });
    let mut sock = check("socket", CheckKind::Readiness);
    sock.tcp = Some(TcpProbe { port });
    let mut file = check("file", CheckKind::Readiness);
    file.exec = Some(ExecProbe {
        command: vec!["test".into(), "-f".into(), flag.display().to_string()],
    });
    s.health_checks = vec![page, sock, file];
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();

    // Nothing answers yet: each check fails past its threshold.
    let mut unready = std::collections::BTreeSet::new();
    while unready.len() < 3 {
        let (e, seen) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Unready { .. })).await;
        assert!(
            !seen.iter().any(|e| e.kind == K::Ready),
            "ready before the checks passed"
        );
        if let K::Unready { check, .. } = e.kind {
            unready.insert(check);
        }
    }
    assert!(!adapter.inspect(&id).await.unwrap().ready);

    // Start the server and create the file: ready.
    let server = Server::start(port, www.path());
    std::fs::write(&flag, "").unwrap();
    wait_event(&mut ev, &id, T, |k| *k == K::Ready).await;
    assert!(adapter.inspect(&id).await.unwrap().ready);

    // Kill the server: http and tcp fail.
    drop(server);
    let (e, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Unready { .. })).await;
    let K::Unready { check, reason } = e.kind else {
        panic!()
    };
    assert!(check == "page" || check == "socket", "{check}: {reason}");
    assert!(!adapter.inspect(&id).await.unwrap().ready);

    // Back: ready again. Then the exec check alone fails.
    let _server = Server::start(port, www.path());
    wait_event(&mut ev, &id, T, |k| *k == K::Ready).await;
    std::fs::remove_file(&flag).unwrap();
    let (e, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Unready { .. })).await;
    assert!(
        matches!(&e.kind, K::Unready { check, .. } if check == "file"),
        "{e:?}"
    );

    // A 404 fails the http check with the status in the reason.
    std::fs::write(&flag, "").unwrap();
    wait_event(&mut ev, &id, T, |k| *k == K::Ready).await;
    std::fs::remove_file(www.path().join("index.html")).unwrap();
    let (e, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Unready { .. })).await;
    assert!(
        matches!(&e.kind, K::Unready { check, reason } if check == "page" && reason.contains("404")),
        "{e:?}"
    );
    // Readiness never restarts the workload.
    assert_eq!(adapter.inspect(&id).await.unwrap().restarts, 0);
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}

fn policy(
    restart: RestartPolicy,
    max: Option<u32>,
    initial_ms: u64,
    max_ms: u64,
) -> LifecyclePolicy {
    LifecyclePolicy {
        restart,
        max_retries: max,
        backoff: Backoff {
            initial: DurationMs(initial_ms),
            max: DurationMs(max_ms),
            multiplier: 2,
        },
        on_exhausted: OnExhausted::WaitForOperator,
        on_failure: Default::default(),
        reset_after: DurationMs::from_secs(600),
        disconnect: Default::default(),
        rollout: Default::default(),
    }
}

#[tokio::test]
async fn failures_restart_with_backoff_until_retries_run_out() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec("crasher", sh("echo run; exit 3"), Placement::default());
    s.lifecycle = policy(RestartPolicy::OnFailure, Some(3), 300, 700);
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();

    let mut exits = Vec::new();
    let mut starts = Vec::new();
    let mut delays = Vec::new();
    let (gave_up, seen) = wait_event(&mut ev, &id, T, |k| matches!(k, K::GaveUp { .. })).await;
    for e in &seen {
        match &e.kind {
            K::Started { generation, .. } => starts.push((e.time, *generation)),
            K::Exited {
                exit,
                requested: false,
            } => {
                assert_eq!(exit.code, Some(3));
                exits.push(e.time);
            }
            K::Failed { failure } => assert_eq!(
                failure,
                &Failure::Runtime(RuntimeFailure::ProcessExit {
                    exit_code: Some(3),
                    signal: None
                })
            ),
            K::RestartScheduled { attempt, delay } => delays.push((*attempt, delay.0)),
            _ => {}
        }
    }
    assert_eq!(
        delays,
        [(1, 300), (2, 600), (3, 700)],
        "exponential, capped at max"
    );
    assert_eq!(starts.iter().map(|s| s.1).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(exits.len(), 4);
    // Measured by event times: each restart waited at least its delay.
    for (i, (_, d)) in delays.iter().enumerate() {
        let waited = starts[i + 1].0.since(exits[i]).0;
        assert!(
            waited >= *d,
            "restart {} after {waited}ms, backoff {d}ms",
            i + 1
        );
        assert!(waited < d + 3000, "restart {} took {waited}ms", i + 1);
    }
    assert_eq!(
        gave_up.kind,
        K::GaveUp {
            restarts: 3,
            on_exhausted: OnExhausted::WaitForOperator
        }
    );
    let st = adapter.inspect(&id).await.unwrap();
    assert_eq!(st.state, InstanceState::Failed);
    assert_eq!(st.restarts, 3);
    assert!(st.message.unwrap().contains("exit code 3"));
    // Every run wrote its line to the same log.
    let runs = adapter.logs(&id, LogQuery::default()).await.unwrap();
    assert_eq!(runs.iter().filter(|l| l.text == "run").count(), 4);

    // An operator start opens a new retry window.
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| {
        matches!(k, K::Started { generation: 5, .. })
    })
    .await;
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn clean_exits_complete_or_restart_per_policy() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    // OnFailure: a clean exit completes (an init job that succeeded).
    let mut job = spec("job", sh("exit 0"), Placement::default());
    job.lifecycle = policy(RestartPolicy::OnFailure, Some(2), 100, 100);
    let id = adapter.create(&job).await.unwrap();
    adapter.start(&id).await.unwrap();
    let (_, seen) = wait_event(&mut ev, &id, T, |k| *k == K::Completed).await;
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e.kind, K::Failed { .. } | K::RestartScheduled { .. }))
    );
    assert_eq!(
        adapter.inspect(&id).await.unwrap().state,
        InstanceState::Completed
    );

    // Always: a clean exit restarts too.
    let mut svc = spec("svc", sh("exit 0"), Placement::default());
    svc.lifecycle = policy(RestartPolicy::Always, Some(1), 100, 100);
    let sid = adapter.create(&svc).await.unwrap();
    adapter.start(&sid).await.unwrap();
    wait_event(&mut ev, &sid, T, |k| {
        matches!(k, K::RestartScheduled { attempt: 1, .. })
    })
    .await;
    wait_event(&mut ev, &sid, T, |k| {
        matches!(k, K::Started { generation: 2, .. })
    })
    .await;
    wait_event(&mut ev, &sid, T, |k| *k == K::Completed).await;

    // Never: a failure gives up at once.
    let mut once = spec("once", sh("kill -9 $$"), Placement::default());
    once.lifecycle = policy(RestartPolicy::Never, None, 100, 100);
    let oid = adapter.create(&once).await.unwrap();
    adapter.start(&oid).await.unwrap();
    let (_, seen) = wait_event(&mut ev, &oid, T, |k| {
        matches!(k, K::GaveUp { restarts: 0, .. })
    })
    .await;
    assert!(seen.iter().any(|e| e.kind
        == K::Failed {
            failure: Failure::Runtime(RuntimeFailure::ProcessExit {
                exit_code: None,
                signal: Some(9)
            })
        }));
    for i in [id, sid, oid] {
        adapter
            .destroy(&i, DestroyOptions::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn liveness_failure_and_deadline_are_application_failures() {
    let state = TestState::new();
    let flag = tempfile::NamedTempFile::new().unwrap();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec("live", sh("exec sleep 120"), Placement::default());
    let mut live = check("alive", CheckKind::Liveness);
    live.exec = Some(ExecProbe {
        command: vec![
            "test".into(),
            "-f".into(),
            flag.path().display().to_string(),
        ],
    });
    s.health_checks = vec![live];
    s.lifecycle = policy(RestartPolicy::Always, Some(1), 100, 100);
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    let (started, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    let K::Started { pid: Some(pid), .. } = started.kind else {
        panic!()
    };
    std::fs::remove_file(flag.path()).unwrap();
    let (f, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Failed { .. })).await;
    assert!(
        matches!(&f.kind, K::Failed { failure: Failure::Application { check: Some(c), .. } } if c == "alive"),
        "{f:?}"
    );
    assert!(!alive(pid), "the unhealthy run was stopped");
    wait_event(&mut ev, &id, T, |k| {
        matches!(k, K::RestartScheduled { attempt: 1, .. })
    })
    .await;
    wait_event(&mut ev, &id, T, |k| {
        matches!(k, K::Started { generation: 2, .. })
    })
    .await;
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();

    // A job past its deadline fails.
    let mut job = spec("slow", sh("exec sleep 60"), Placement::default());
    job.deadline = Some(DurationMs(300));
    job.lifecycle = policy(RestartPolicy::Never, None, 100, 100);
    let jid = adapter.create(&job).await.unwrap();
    adapter.start(&jid).await.unwrap();
    let (f, _) = wait_event(&mut ev, &jid, T, |k| matches!(k, K::Failed { .. })).await;
    assert!(
        matches!(&f.kind, K::Failed { failure: Failure::Application { check: None, detail } } if detail.contains("deadline")),
        "{f:?}"
    );
    adapter
        .destroy(&jid, DestroyOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn stop_honours_sigterm_and_escalates_to_sigkill() {
    let state = TestState::new();
    let cg = TestCgroups::create("stop");
    let (adapter, mut ev) = open(state.path()).await;
    let placement = Placement {
        cgroup: cg.placement(),
        ..Placement::default()
    };

    let polite = spec(
        "polite",
        sh("trap 'echo got-term; exit 0' TERM; echo armed; while :; do sleep 0.05; done"),
        placement.clone(),
    );
    let id = adapter.create(&polite).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    // Started is the exec; a TERM before the shell set its trap would kill it outright.
    let log = state.path().join("logs/daros-test.app.polite.0/output.log");
    wait_until(T, "the trap to be set", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("armed"))
    })
    .await;
    let t0 = Instant::now();
    adapter.stop(&id, Duration::from_secs(10)).await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stopped by SIGTERM, not the grace period"
    );
    let (e, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Exited { .. })).await;
    assert!(
        matches!(e.kind, K::Exited { exit, requested: true } if exit.code == Some(0)),
        "{e:?}"
    );
    wait_event(&mut ev, &id, T, |k| *k == K::Stopped).await;
    assert!(
        adapter
            .logs(&id, LogQuery::default())
            .await
            .unwrap()
            .iter()
            .any(|l| l.text == "got-term")
    );
    assert_eq!(
        adapter.inspect(&id).await.unwrap().state,
        InstanceState::Stopped
    );
    adapter.stop(&id, Duration::from_secs(1)).await.unwrap(); // idempotent
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();

    // Ignores SIGTERM and leaves a daemonised descendant in its cgroup.
    let stubborn = spec(
        "stubborn",
        sh("trap '' TERM; setsid sleep 300 & while :; do sleep 0.05; done"),
        placement,
    );
    let id = adapter.create(&stubborn).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    wait_until(T, "the daemonised child", || cg.pids().len() >= 2).await;
    let t0 = Instant::now();
    adapter.stop(&id, Duration::from_millis(500)).await.unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "killed before the grace period ended ({took:?})"
    );
    let (e, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Exited { .. })).await;
    assert!(
        matches!(e.kind, K::Exited { exit, requested: true } if exit.signal == Some(9)),
        "{e:?}"
    );
    wait_until(T, "an empty cgroup", || cg.pids().is_empty()).await;
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_specs_and_failed_starts_say_why() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let e = adapter
        .create(&spec(
            "missing",
            json!({"command": "/no/such/daros-binary"}),
            Placement::default(),
        ))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("runtimeSpec.command") && msg.contains("/no/such/daros-binary"),
        "{msg}"
    );
    let e = adapter
        .create(&spec(
            "typo",
            json!({"command": "/bin/true", "workdir": "/"}),
            Placement::default(),
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("workdir"), "{e}");
    let mut vm = spec("vm", sh("true"), Placement::default());
    vm.runtime.runtime_type = daros_coordinator::model::runtime::RuntimeType::Vm;
    assert!(matches!(
        adapter.create(&vm).await,
        Err(AdapterError::Unsupported { .. })
    ));

    // The program disappears between create and start: start fails at exec.
    let bin = tempfile::tempdir().unwrap();
    let prog = bin.path().join("prog");
    std::fs::copy("/bin/true", &prog).unwrap();
    let id = adapter
        .create(&spec(
            "gone",
            json!({"command": prog}),
            Placement::default(),
        ))
        .await
        .unwrap();
    std::fs::remove_file(&prog).unwrap();
    let e = adapter.start(&id).await.unwrap_err();
    assert!(
        matches!(&e, AdapterError::Launch { stage, .. } if stage == "exec"),
        "{e}"
    );
    assert!(e.to_string().contains("prog"), "{e}");
    let st = adapter.inspect(&id).await.unwrap();
    assert_eq!(st.state, InstanceState::Failed);
    assert!(matches!(
        st.last_failure,
        Some(Failure::Runtime(
            RuntimeFailure::AdapterCommunicationError { .. }
        )) | None
    ));

    // The cgroup disappears between create and start: start fails at joining it.
    let cg = TestCgroups::create("gone");
    let id2 = adapter
        .create(&spec(
            "nocg",
            sh("sleep 5"),
            Placement {
                cgroup: cg.placement(),
                ..Placement::default()
            },
        ))
        .await
        .unwrap();
    let dirs = cg.dirs.clone();
    drop(cg);
    assert!(!dirs[0].exists());
    let e = adapter.start(&id2).await.unwrap_err();
    assert!(
        matches!(&e, AdapterError::Launch { stage, .. } if stage == "join cgroup"),
        "{e}"
    );
    let _ = ev.try_next();
}

#[tokio::test]
async fn a_killed_shim_takes_its_workload_and_is_a_communication_failure() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec("orphan", sh("exec sleep 120"), Placement::default());
    s.lifecycle = policy(RestartPolicy::Always, Some(1), 100, 100);
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    let st = adapter.inspect(&id).await.unwrap();
    let RuntimeDetail::Process {
        pid: Some(pid),
        shim_pid: Some(shim),
        ..
    } = st.detail
    else {
        panic!()
    };
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let (f, _) = wait_event(&mut ev, &id, T, |k| matches!(k, K::Failed { .. })).await;
    assert!(
        matches!(&f.kind, K::Failed { failure: Failure::Runtime(RuntimeFailure::AdapterCommunicationError { detail }) }
            if detail.contains("shim")),
        "{f:?}"
    );
    wait_until(T, "the workload to die with its shim", || !alive(pid)).await;
    // The policy restarts it under a new shim.
    wait_event(&mut ev, &id, T, |k| {
        matches!(k, K::Started { generation: 2, .. })
    })
    .await;
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn leftovers_of_the_process_group_end_with_the_main_process() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let marker = tempfile::NamedTempFile::new().unwrap();
    // The main process starts a background child in its group and exits.
    let mut s = spec(
        "leaver",
        sh(&format!(
            "sleep 300 & echo $! > {}; exit 0",
            marker.path().display()
        )),
        Placement::default(),
    );
    s.lifecycle = policy(RestartPolicy::Never, None, 100, 100);
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| *k == K::Completed).await;
    let bg: u32 = std::fs::read_to_string(marker.path())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(T, "the background child to be killed", || !alive(bg)).await;
    adapter
        .destroy(&id, DestroyOptions::default())
        .await
        .unwrap();
}
