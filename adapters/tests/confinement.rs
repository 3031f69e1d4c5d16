//! The security baseline on real processes (issue 21): a workload denied
//! privileges cannot regain them — `setuid(0)` fails, a refused system call
//! fails with EPERM, a write outside its writable paths fails and leaves
//! nothing on disk, a dropped capability is gone — and `/proc/PID/status`
//! shows the bounding set, `NoNewPrivs` and the seccomp filter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use daros_adapters::adapter::{DestroyOptions, LogQuery, RuntimeAdapter};
use daros_adapters::event::RuntimeEventKind as K;
use daros_adapters::placement::Placement;
use daros_adapters::status::RuntimeDetail;
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, RestartPolicy};
use daros_coordinator::model::security::{Capability, SeccompProfile, SecurityContext};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// Runs `script` under `ctx` as `user` to its end; its output lines.
async fn run(name: &str, user: &str, script: &str, ctx: SecurityContext) -> Vec<String> {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec(
        name,
        json!({"command": "/bin/sh", "args": ["-c", script], "user": user, "workingDir": "/tmp"}),
        Placement::default(),
    );
    s.lifecycle = LifecyclePolicy {
        restart: RestartPolicy::Never,
        ..LifecyclePolicy::default()
    };
    s.security = ctx;
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| {
        matches!(k, K::Completed | K::GaveUp { .. } | K::Failed { .. })
    })
    .await;
    // The log is written by the shim as the workload ends.
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = adapter
            .logs(&id, LogQuery::default())
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.text)
            .collect();
        if lines.iter().any(|l| l == "end") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = adapter
        .destroy(
            &id,
            DestroyOptions {
                grace: Duration::from_secs(1),
                remove_logs: true,
            },
        )
        .await;
    lines
}

fn caps(names: &[&str]) -> Vec<Capability> {
    names
        .iter()
        .map(|n| Capability::try_from(n.to_string()).unwrap())
        .collect()
}

#[tokio::test]
async fn denied_privileges_cannot_be_regained() {
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("writable");
    let denied = dir.path().join("elsewhere");
    for d in [&ok, &denied] {
        std::fs::create_dir_all(d).unwrap();
        // Owned by nobody: only the confinement can refuse the write.
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = format!(
        "python3 -c 'import os\ntry:\n os.setuid(0); print(\"setuid ok\")\nexcept OSError as e: print(\"setuid errno\", e.errno)'\n\
         echo a > {ok}/file && echo 'write inside ok' || echo 'write inside refused'\n\
         (echo b > {denied}/file) 2>/dev/null && echo 'write outside ok' || echo 'write outside refused'\n\
         echo c > /dev/null && echo 'dev null ok'\n\
         grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status\n\
         echo end",
        ok = ok.display(),
        denied = denied.display()
    );
    let ctx = SecurityContext {
        writable_paths: Some(vec![ok.display().to_string()]),
        ..SecurityContext::default()
    };
    let out = run("denied", "nobody", &script, ctx).await;
    assert_eq!(
        out,
        [
            "setuid errno 1",
            "write inside ok",
            "write outside refused",
            "dev null ok",
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
            "end"
        ]
    );
    assert!(ok.join("file").exists());
    assert!(!denied.join("file").exists(), "nothing written outside");
}

#[tokio::test]
async fn the_runtime_default_filter_refuses_kernel_interfaces() {
    // kcmp(2) needs no privilege; only the filter refuses it.
    let script = format!(
        "python3 -c 'import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         r = libc.syscall({kcmp}, os.getpid(), os.getpid(), 0, 0, 0)\n\
         print(\"kcmp\", r, ctypes.get_errno())'\necho end",
        kcmp = libc::SYS_kcmp
    );
    let out = run("filtered", "nobody", &script, SecurityContext::default()).await;
    assert_eq!(out, ["kcmp -1 1", "end"], "refused with EPERM");
    let open = SecurityContext {
        seccomp: SeccompProfile::Unconfined,
        ..SecurityContext::default()
    };
    let out = run("unfiltered", "nobody", &script, open).await;
    assert_eq!(out, ["kcmp 0 0", "end"], "the same call without the filter");
}

#[tokio::test]
async fn dropped_capabilities_are_gone_even_for_root() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, "x").unwrap();
    let script = format!(
        "chown 65534 {f} 2>/dev/null && echo 'chown ok' || echo 'chown refused'\n\
         grep -E '^CapBnd:' /proc/self/status\necho end",
        f = f.display()
    );
    let mut ctx = SecurityContext::default();
    ctx.capabilities.retain(|c| c.name() != "CHOWN");
    let out = run("nochown", "root", &script, ctx.clone()).await;
    let mask: u64 = ctx.capabilities.iter().map(|c| 1u64 << c.number()).sum();
    assert_eq!(
        out,
        [
            "chown refused".to_string(),
            format!("CapBnd:\t{mask:016x}"),
            "end".into()
        ]
    );
    // With CHOWN kept it works: the refusal was the confinement.
    let out = run("chown", "root", &script, SecurityContext::default()).await;
    assert_eq!(out[0], "chown ok");
}

/// Checked from outside as well: a running workload's `/proc/PID/status`.
#[tokio::test]
async fn proc_status_shows_the_confinement() {
    let state = TestState::new();
    let (adapter, mut ev) = open(state.path()).await;
    let mut s = spec(
        "status",
        json!({"command": "/bin/sleep", "args": ["30"], "user": "nobody"}),
        Placement::default(),
    );
    s.security = SecurityContext {
        capabilities: caps(&["NET_BIND_SERVICE"]),
        ..SecurityContext::default()
    };
    let id = adapter.create(&s).await.unwrap();
    adapter.start(&id).await.unwrap();
    wait_event(&mut ev, &id, T, |k| matches!(k, K::Started { .. })).await;
    let st = adapter.inspect(&id).await.unwrap();
    let RuntimeDetail::Process { pid: Some(pid), .. } = st.detail else {
        panic!("{st:?}")
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(field("CapBnd"), format!("{:016x}", 1u64 << 10), "{status}");
    assert_eq!(field("CapEff"), "0000000000000000");
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    assert_eq!(field("Uid").split_whitespace().next(), Some("65534"));
    adapter
        .destroy(
            &id,
            DestroyOptions {
                grace: Duration::from_secs(1),
                remove_logs: true,
            },
        )
        .await
        .unwrap();
}
