//! The `storage` trait on real processes (issue 17): a volume of 16 MiB is an
//! ext4 file system on a loop device (checked in /proc/self/mountinfo and by
//! statvfs; a write past it fails with ENOSPC), its root belongs to the
//! workload's user (nobody) and is writable under a read-only root
//! filesystem; its data outlives a new version and a stop and start; it stays
//! after the application is deleted until an operator deletes it, which is
//! refused while a process holds it.
//!
//! Needs root, loop devices, `mkfs.ext4`, and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{APP_WAIT, RestartableDarosd, TestRoot, alive, environ, main_pid, phase, wait_for};

fn spec(version: &str) -> String {
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: vol-team}}
spec: {{quota: {{cpu: "2", memory: 1Gi}}}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: store, tenant: vol-team}}
spec:
  workloads:
    - name: db
      runtime: {{type: process, os: linux}}
      image: /bin/sh
      resources:
        cpu: {{request: 50m}}
        memory: {{request: 16Mi, limit: 64Mi}}
      security: {{readOnlyRoot: true}}
      traits:
        - type: storage
          properties:
            volumes: [{{name: data, size: 16Mi}}]
      runtimeSpec:
        command: /bin/sh
        args: ["-c", "echo {version} >> \"$DAROS_VOLUME_DATA/runs\"; (echo x > /var/tmp/daros-storage-test) 2>/dev/null && echo root-writable >> \"$DAROS_VOLUME_DATA/runs\"; exec 3>>\"$DAROS_VOLUME_DATA/held\"; exec /bin/sleep 600"]
        user: nobody
"#
    )
}

fn fs_type(mount_point: &str) -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (f[4] == mount_point).then(|| format!("{} {}", f[sep + 1], f[sep + 2]))
        })
}

fn apply(a: &RestartableDarosd, dir: &Path, version: &str) {
    let f = dir.join(format!("store-{version}.yaml"));
    std::fs::write(&f, spec(version)).unwrap();
    a.ctl_ok(&["apply", "-f", &f.display().to_string()]);
}

#[test]
fn volumes_hold_their_size_and_data_until_deleted() {
    let t = TestRoot::new("storage");
    let dir = tempfile::tempdir().unwrap();
    // The workload runs as nobody: let it through to its mount point.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let volumes = dir.path().join("volumes");
    let mut a = RestartableDarosd::new(
        dir.path(),
        t.name(),
        "storage",
        &[],
        &[
            ("DAROS_RUNTIME_STOP_GRACE", "2s"),
            ("DAROS_RUNTIME_VOLUME_DIR", volumes.to_str().unwrap()),
        ],
    );
    let _unmount = common::UnmountUnder(dir.path().to_path_buf());
    a.spawn_serving();

    apply(&a, dir.path(), "v1");
    a.wait_app("Running", "store", |d| {
        phase(d) == "Running" && d["version"] == 1
    });
    let pid1 = main_pid(&t, "vol-team.store.db-v1.0");
    let vol = environ(pid1)
        .into_iter()
        .find_map(|e| e.strip_prefix("DAROS_VOLUME_DATA=").map(str::to_string))
        .expect("DAROS_VOLUME_DATA in the environment");
    assert!(vol.starts_with(&volumes.display().to_string()), "{vol}");
    // A file system of its own, of the asked size, owned by nobody.
    let fs = fs_type(&vol).expect("the volume is a mount point");
    assert!(fs.starts_with("ext4 /dev/loop"), "{fs}");
    let st = rustix::fs::statvfs(vol.as_str()).unwrap();
    let total = st.f_blocks * st.f_frsize;
    assert!((12 << 20..=16 << 20).contains(&total), "{total} bytes");
    assert_eq!(
        std::fs::metadata(&vol).unwrap().uid(),
        65534,
        "owned by nobody"
    );
    wait_for("v1 wrote its mark", APP_WAIT, || {
        std::fs::read_to_string(format!("{vol}/runs"))
            .ok()
            .filter(|r| r.contains("v1"))
    });
    let runs = std::fs::read_to_string(format!("{vol}/runs")).unwrap();
    assert!(
        !runs.contains("root-writable"),
        "the root filesystem stayed read-only: {runs}"
    );

    // The size is a hard limit.
    let mut f = std::fs::File::create(format!("{vol}/fill")).unwrap();
    let chunk = vec![7u8; 1 << 20];
    let mut written = 0u64;
    let err = loop {
        use std::io::Write;
        match f.write_all(&chunk).and_then(|()| f.sync_all()) {
            Ok(()) => written += 1 << 20,
            Err(e) => break e,
        }
        assert!(
            written <= 32 << 20,
            "wrote {written} bytes into a 16 MiB volume"
        );
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    drop(f);
    std::fs::remove_file(format!("{vol}/fill")).unwrap();

    // Refused while a process holds it.
    let id = "vol-team.store.db.0.data";
    let out = a.ctl(&["delete", "volume", id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A new version finds the same data.
    apply(&a, dir.path(), "v2");
    a.wait_app("v2 Running", "store", |d| {
        phase(d) == "Running" && d["version"] == 2
    });
    wait_for("v1 stopped", APP_WAIT, || (!alive(pid1)).then_some(()));
    wait_for("v2 wrote its mark", APP_WAIT, || {
        std::fs::read_to_string(format!("{vol}/runs"))
            .ok()
            .filter(|r| r.contains("v2"))
    });
    let pid2 = main_pid(&t, "vol-team.store.db-v2.0");
    assert!(environ(pid2).contains(&format!("DAROS_VOLUME_DATA={vol}")));

    // Stop and start: still there.
    a.ctl_ok(&["operate", "store", "--tenant", "vol-team", "stop"]);
    wait_for("stopped", APP_WAIT, || (!alive(pid2)).then_some(()));
    a.ctl_ok(&["operate", "store", "--tenant", "vol-team", "start"]);
    a.wait_app("Running again", "store", |d| phase(d) == "Running");
    wait_for("the restarted run wrote its mark", APP_WAIT, || {
        std::fs::read_to_string(format!("{vol}/runs"))
            .ok()
            .filter(|r| r.matches("v2").count() == 2)
    });
    assert_eq!(
        std::fs::read_to_string(format!("{vol}/runs")).unwrap(),
        "v1\nv2\nv2\n"
    );

    // Deleting the application keeps the volume; deleting the volume takes it.
    let pid3 = main_pid(&t, "vol-team.store.db-v2.0");
    a.ctl_ok(&["delete", "app", "store", "--tenant", "vol-team"]);
    wait_for("the process gone", APP_WAIT, || {
        (!alive(pid3)).then_some(())
    });
    let listed: serde_json::Value = a.json(&["get", "volumes"]);
    assert_eq!(listed[0]["id"], id, "{listed}");
    assert_eq!(listed[0]["sizeBytes"], 16 << 20);
    a.ctl_ok(&["delete", "volume", id]);
    assert!(fs_type(&vol).is_none(), "still mounted");
    assert!(!Path::new(&vol).exists());
    assert_eq!(a.json(&["get", "volumes"]), serde_json::json!([]));
    let out = a.ctl(&["delete", "volume", id]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no volume"));
    let out = a.ctl(&["delete", "volume", "..etc.passwd"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected tenant.app.workload.replica.name"),
        "{err}"
    );
}
