//! `examples/three-tier.yaml` on a real darosd with real processes (issue 17):
//! Debian's redis-server as the datastore (its password from a Secret, its
//! data on a storage volume), an init job that writes the schema into that
//! redis before web starts, web (busybox httpd) and a worker counting in
//! redis. Checked against reality: the port answers the page from the Config,
//! redis answers with the password only, the init job's key is there, the
//! worker's counter grows. Then each part is killed (`kill -9`) and the
//! lifecycle policy (`restart: Always`) is followed: a new process, the
//! application Running again; redis comes back with its data (the counter
//! never goes back), and the password is in no API answer. The datastore's
//! log-shipping sidecar (`tail -F` of redis's log file) runs in the
//! datastore's cgroup as nobody, its lines are in the instance's log, a
//! killed sidecar is started again without touching redis, and it ends and
//! starts again with redis.
//!
//! Needs root, loop devices, `mkfs.ext4`, `redis-server` (CI installs it) and
//! `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::{APP_WAIT, RestartableDarosd, TestRoot, alive, free_port, http_get, phase, wait_for};

const EXAMPLE: &str = include_str!("../../examples/three-tier.yaml");

fn redis(port: u16, password: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .env("REDISCLI_AUTH", password)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn counter(port: u16, password: &str) -> Option<u64> {
    redis(port, password, &["GET", "jobs:done"])?.parse().ok()
}

fn running(d: &serde_json::Value) -> bool {
    phase(d) == "Running"
        && d["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 3 && i.iter().all(|x| x["state"]["state"] == "ready"))
}

fn is_shipper(pid: u32) -> bool {
    common::cmdline(pid)
        .first()
        .is_some_and(|c| c.ends_with("tail"))
}

/// The workload's own main process (not its sidecar, also a child of the shim).
fn workload_pid(t: &TestRoot, cgroup: &str) -> u32 {
    let mains: Vec<u32> = common::main_pids(t, cgroup)
        .into_iter()
        .filter(|p| !is_shipper(*p))
        .collect();
    assert_eq!(mains.len(), 1, "one main process in {cgroup}: {mains:?}");
    mains[0]
}

fn kill9(pid: u32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
}

#[test]
fn three_tier_runs_and_each_part_comes_back() {
    assert!(
        Path::new("/usr/bin/redis-server").is_file(),
        "redis-server missing: apt-get install redis-server (CI installs it)"
    );
    let t = TestRoot::new("three");
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (rport, wport) = (free_port(), free_port());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let password = format!("pw-{nanos:x}");
    let www = dir.path().join("www-root");
    let spec = EXAMPLE
        .replace("16379", &rport.to_string())
        .replace("18081", &wport.to_string())
        .replace("change-me", &password)
        .replace("/tmp/daros-three-tier", &www.display().to_string());
    assert_ne!(spec, EXAMPLE);
    let f = dir.path().join("three-tier.yaml");
    std::fs::write(&f, &spec).unwrap();
    let volumes = dir.path().join("volumes");
    let mut a = RestartableDarosd::new(
        dir.path(),
        t.name(),
        "three",
        &[],
        &[
            ("DAROS_RUNTIME_STOP_GRACE", "2s"),
            ("DAROS_RUNTIME_VOLUME_DIR", volumes.to_str().unwrap()),
        ],
    );
    let _unmount = common::UnmountUnder(dir.path().to_path_buf());
    a.spawn_serving();
    a.ctl_ok(&["apply", "-f", &f.display().to_string()]);
    a.wait_app("all three ready", "three-tier/three-tier", running);

    // Reality: the page from the Config, redis with the password only, the
    // init job's key, the worker counting.
    let page =
        http_get(wport, "/index.html", std::time::Duration::from_secs(2)).unwrap_or_default();
    assert!(page.contains("hello from three tiers"), "{page}");
    assert_eq!(
        redis(rport, &password, &["GET", "schema:version"]).as_deref(),
        Some("1")
    );
    let noauth = redis(rport, "wrong", &["GET", "schema:version"]).unwrap_or_default();
    assert!(
        !noauth.contains('1') || noauth.contains("WRONGPASS"),
        "{noauth}"
    );
    let c0 = wait_for("the worker counts", APP_WAIT, || {
        counter(rport, &password).filter(|c| *c >= 2)
    });
    let aof = volumes.join("three-tier.three-tier.datastore.0.data");
    assert!(
        aof.join("appendonlydir").is_dir() || aof.join("appendonly.aof").is_file(),
        "no AOF in {}",
        aof.display()
    );

    // The sidecar: in the datastore's cgroup, as nobody, shipping redis's log
    // file into the instance's log.
    let ds_cg = "three-tier.three-tier.datastore-v1.0";
    let shipper = || {
        common::pids_of(&t, ds_cg)
            .into_iter()
            .find(|p| is_shipper(*p))
    };
    let tail1 = wait_for("the log shipper runs", APP_WAIT, shipper);
    assert_eq!(
        std::fs::metadata(format!("/proc/{tail1}")).unwrap().uid(),
        65534
    );
    let shipped = || {
        let out = a.ctl(&["logs", "three-tier/three-tier/datastore"]);
        String::from_utf8_lossy(&out.stdout).contains("Ready to accept connections")
    };
    wait_for("redis's log in the instance's log", APP_WAIT, || {
        shipped().then_some(())
    });
    let redis1 = workload_pid(&t, ds_cg);
    kill9(tail1);
    let tail2 = wait_for("the log shipper again", APP_WAIT, || {
        shipper().filter(|p| *p != tail1)
    });
    assert_eq!(
        workload_pid(&t, ds_cg),
        redis1,
        "redis untouched by its sidecar's restart"
    );
    let logs = String::from_utf8_lossy(&a.ctl(&["logs", "three-tier/three-tier/datastore"]).stdout)
        .into_owned();
    assert!(
        logs.contains("sidecar log-shipper was killed by signal 9"),
        "{logs}"
    );

    // Each part killed: restarted by the lifecycle policy, Running again.
    for (workload, cg) in [
        ("datastore", "three-tier.three-tier.datastore-v1.0"),
        ("worker", "three-tier.three-tier.worker-v1.0"),
        ("web", "three-tier.three-tier.web-v1.0"),
    ] {
        let before = counter(rport, &password).unwrap_or(0);
        let pid = workload_pid(&t, cg);
        kill9(pid);
        wait_for(&format!("{workload} killed"), APP_WAIT, || {
            (!alive(pid)).then_some(())
        });
        let new = wait_for(&format!("{workload} restarted"), APP_WAIT, || {
            common::main_pids(&t, cg)
                .into_iter()
                .find(|p| *p != pid && !is_shipper(*p))
        });
        a.wait_app(
            &format!("Running after {workload} was killed"),
            "three-tier/three-tier",
            running,
        );
        let after = wait_for("the counter again", APP_WAIT, || {
            counter(rport, &password).filter(|c| *c > before)
        });
        eprintln!("{workload}: pid {pid} killed, {new} runs; counter {before} -> {after}");
        if workload == "datastore" {
            // Its sidecar went with it and came back with the new run.
            assert!(!alive(tail2), "the sidecar outlived its instance");
            wait_for("the log shipper of the new run", APP_WAIT, shipper);
        }
        // The init job ran once, before web's first start: its key is there
        // after redis restarted only if the volume kept redis's data.
        assert_eq!(
            redis(rport, &password, &["GET", "schema:version"]).as_deref(),
            Some("1"),
            "after {workload} was killed"
        );
        assert!(
            after > before,
            "{workload}: counter went from {before} to {after}"
        );
    }
    let d = a.describe("three-tier/three-tier");
    let restarts: u64 = d["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["restarts"].as_u64().unwrap_or(0))
        .sum();
    assert!(restarts >= 3, "three restarts recorded: {d:#}");
    assert!(c0 >= 2);

    // The password: not in what the API says about the application.
    for args in [
        vec!["describe", "app", "three-tier/three-tier"],
        vec!["get", "secrets", "--tenant", "three-tier"],
        vec!["get", "apps"],
    ] {
        let out = a.ctl(&args);
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(&password),
            "{args:?}"
        );
    }
    assert!(!a.log().contains(&password));
    // Nor in any process's command line (world-readable), while redis runs
    // and the worker starts redis-cli every second (each lives a few ms: the
    // scan runs back to back for 5 s).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut scans = 0;
    while std::time::Instant::now() < until {
        let leaked: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok().map(|c| (e, c)))
            .filter(|(_, c)| c.windows(password.len()).any(|w| w == password.as_bytes()))
            .map(|(e, c)| format!("{:?}: {}", e.file_name(), String::from_utf8_lossy(&c)))
            .collect();
        assert!(leaked.is_empty(), "password in a command line: {leaked:?}");
        scans += 1;
    }
    eprintln!("{scans} scans of every command line: no password");
}
