//! Checks, run inside the guest, that the VM gives the cgroup-v2, PSI, IO and eBPF tests
//! what they rely on. `daros-vmtest guest-check` runs them and prints one line per check.
//!
//! Every cgroup it creates is named `daros-test-check-*` and removed by a guard, even
//! when a check fails. It refuses to run outside the VM (it writes cgroup files).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::vm::job::{ENV_DISK_MAJMIN, ENV_DISK_MOUNT, ENV_IN_VM, GUEST_DISK_DEV};

/// The cgroup2 mount point.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Controllers that must be enabled in the root's `cgroup.subtree_control`.
pub const CONTROLLERS: &[&str] = &[
    "cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc",
];

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    /// Short name (`cgroup2-only`, `pids-max-fork`, ...).
    pub name: &'static str,
    /// `Ok(detail)` or `Err(reason)`.
    pub result: Result<String, String>,
    /// How long it took.
    pub elapsed: Duration,
}

type CheckResult = Result<String, String>;

/// A named check: returns a detail line or the reason it failed.
pub type Check = (&'static str, fn() -> CheckResult);

fn read(path: impl AsRef<Path>) -> Result<String, String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))
}

fn write(path: impl AsRef<Path>, value: &str) -> Result<(), String> {
    let path = path.as_ref();
    std::fs::write(path, value).map_err(|e| format!("write {value:?} to {}: {e}", path.display()))
}

/// A `daros-test-check-*` cgroup that is emptied and removed on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn create(name: &str) -> Result<Self, String> {
        let path = Path::new(CGROUP_ROOT).join(format!("daros-test-check-{name}"));
        if path.exists() {
            drop(TestCgroup(path.clone()));
        }
        std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        Ok(Self(path))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Runs `script` with /bin/sh after moving the shell into this cgroup.
    fn sh(&self, script: &str) -> Result<std::process::Output, String> {
        let procs = self.file("cgroup.procs");
        let full = format!("echo $$ > '{}' || exit 90\n{script}", procs.display());
        Command::new("/bin/sh")
            .args(["-c", &full])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run sh: {e}"))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.0).is_err() && self.0.exists() && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn mounts() -> Result<Vec<(String, String, String)>, String> {
    Ok(read("/proc/self/mounts")?
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| (f[1].to_owned(), f[2].to_owned(), f[3].to_owned()))
        })
        .collect())
}

fn mount_of(fstype: &str, at: &str) -> Result<String, String> {
    mounts()?
        .into_iter()
        .find(|(mp, t, _)| mp == at && t == fstype)
        .map(|(_, _, opts)| opts)
        .ok_or_else(|| format!("no {fstype} mounted at {at}"))
}

fn check_in_vm() -> CheckResult {
    match std::env::var(ENV_IN_VM).as_deref() {
        Ok("1") => Ok(format!(
            "{ENV_IN_VM}=1, kernel {}",
            read("/proc/sys/kernel/osrelease")?.trim()
        )),
        other => Err(format!("{ENV_IN_VM} is {other:?}, expected \"1\"")),
    }
}

fn check_cgroup2_only() -> CheckResult {
    let cg: Vec<_> = mounts()?
        .into_iter()
        .filter(|(_, t, _)| t == "cgroup" || t == "cgroup2")
        .collect();
    match cg.as_slice() {
        [(mp, t, opts)] if mp == CGROUP_ROOT && t == "cgroup2" => {
            if opts.split(',').any(|o| o == "nsdelegate") {
                Ok(format!("cgroup2 on {CGROUP_ROOT} ({opts})"))
            } else {
                Err(format!("cgroup2 mounted without nsdelegate: {opts}"))
            }
        }
        other => Err(format!(
            "expected exactly one cgroup2 mount at {CGROUP_ROOT}, found {other:?}"
        )),
    }
}

fn check_controllers() -> CheckResult {
    let enabled = read(Path::new(CGROUP_ROOT).join("cgroup.subtree_control"))?;
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    let missing: Vec<&&str> = CONTROLLERS
        .iter()
        .filter(|c| !enabled.contains(c))
        .collect();
    if missing.is_empty() {
        Ok(enabled.join(" "))
    } else {
        Err(format!(
            "not enabled in the root subtree_control: {missing:?} (enabled: {enabled:?})"
        ))
    }
}

fn disk_majmin() -> Result<String, String> {
    let sys = read("/sys/block/vda/dev")?.trim().to_owned();
    match std::env::var(ENV_DISK_MAJMIN) {
        Ok(env) if env == sys => Ok(sys),
        other => Err(format!(
            "{ENV_DISK_MAJMIN} is {other:?} but /sys/block/vda/dev says {sys}"
        )),
    }
}

fn check_knobs_read_back() -> CheckResult {
    let majmin = disk_majmin()?;
    let cg = TestCgroup::create("knobs")?;
    let knobs = [
        ("memory.min", "16777216".to_owned(), "16777216".to_owned()),
        ("memory.low", "33554432".into(), "33554432".into()),
        ("memory.high", "268435456".into(), "268435456".into()),
        ("memory.max", "536870912".into(), "536870912".into()),
        ("cpu.max", "10000 100000".into(), "10000 100000".into()),
        ("cpu.weight", "50".into(), "50".into()),
        ("cpuset.cpus", "0".into(), "0".into()),
        ("pids.max", "5".into(), "5".into()),
        (
            "io.max",
            format!("{majmin} rbps=2097152 wiops=100"),
            format!("{majmin} rbps=2097152 wbps=max riops=max wiops=100"),
        ),
    ];
    let mut done = Vec::new();
    for (file, value, expect) in knobs {
        write(cg.file(file), &value)?;
        let got = read(cg.file(file))?;
        if got.trim() != expect {
            return Err(format!(
                "{file}: wrote {value:?}, read back {:?}, expected {expect:?}",
                got.trim()
            ));
        }
        done.push(file);
    }
    Ok(done.join(" "))
}

fn check_pids_max_fork() -> CheckResult {
    let cg = TestCgroup::create("pids")?;
    write(cg.file("pids.max"), "5")?;
    // The shell is task 1 of 5: four background children fit, the fifth fork must fail.
    // The children must not hold the output pipes open, or collecting the output waits for them.
    let out =
        cg.sh("i=0; while [ $i -lt 8 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); done; exit 0")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = read(cg.file("pids.events"))?;
    let refused: u64 = events
        .lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let current = read(cg.file("pids.current"))?.trim().to_owned();
    if out.status.success() || refused == 0 || current != "4" {
        return Err(format!(
            "expected the 5th task to be refused: shell {}, pids.events max {refused}, pids.current {current} (want 4), stderr {stderr:?}",
            out.status
        ));
    }
    Ok(format!(
        "4 children started, fork refused {refused}x: {}",
        stderr.trim()
    ))
}

fn timed_read(cg: Option<&TestCgroup>, skip_mib: u32) -> Result<Duration, String> {
    let dd = format!(
        "exec dd if={GUEST_DISK_DEV} of=/dev/null bs=1M count=4 skip={skip_mib} iflag=direct 2>/dev/null"
    );
    let t0 = Instant::now();
    let out = match cg {
        Some(cg) => cg.sh(&dd)?,
        None => Command::new("/bin/sh")
            .args(["-c", &dd])
            .output()
            .map_err(|e| e.to_string())?,
    };
    if !out.status.success() {
        return Err(format!("dd failed: {}", out.status));
    }
    Ok(t0.elapsed())
}

fn check_io_max_throttles() -> CheckResult {
    let majmin = disk_majmin()?;
    // The faster of two: under TCG a busy host can slow one start of sh and dd by a second.
    let free = timed_read(None, 0)?.min(timed_read(None, 4)?);
    let cg = TestCgroup::create("io")?;
    write(cg.file("io.max"), &format!("{majmin} rbps=2097152"))?;
    let limited = timed_read(Some(&cg), 8)?;
    // 4 MiB at 2 MiB/s: about 2 s (the first slice may be granted at once), so at
    // least a second more than the same read unlimited (a CI host once made that 0.91 s).
    if limited < Duration::from_millis(1200) || limited < free + Duration::from_secs(1) {
        return Err(format!(
            "4 MiB direct read took {:.2} s under rbps=2MiB/s vs {:.2} s unlimited",
            limited.as_secs_f64(),
            free.as_secs_f64()
        ));
    }
    Ok(format!(
        "4 MiB direct read: {:.2} s unlimited, {:.2} s under rbps=2MiB/s",
        free.as_secs_f64(),
        limited.as_secs_f64()
    ))
}

fn check_block_device() -> CheckResult {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(GUEST_DISK_DEV).map_err(|e| format!("{GUEST_DISK_DEV}: {e}"))?;
    if !meta.file_type().is_block_device() {
        return Err(format!("{GUEST_DISK_DEV} is not a block device"));
    }
    let majmin = disk_majmin()?;
    let mount =
        std::env::var(ENV_DISK_MOUNT).map_err(|_| format!("{ENV_DISK_MOUNT} is not set"))?;
    let opts = mount_of("ext4", &mount)?;
    let probe = Path::new(&mount).join("daros-test-check-probe");
    let dd = format!(
        "dd if=/dev/zero of={} bs=1M count=2 oflag=direct 2>&1",
        probe.display()
    );
    let out = Command::new("/bin/sh")
        .args(["-c", &dd])
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&probe);
    if !out.status.success() {
        return Err(format!(
            "direct write to {mount} failed: {}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    let size_mib = read("/sys/block/vda/size")?
        .trim()
        .parse::<u64>()
        .unwrap_or(0)
        / 2048;
    Ok(format!(
        "{GUEST_DISK_DEV} {majmin}, {size_mib} MiB, ext4 on {mount} ({opts}), O_DIRECT write ok"
    ))
}

fn check_psi() -> CheckResult {
    let cg = TestCgroup::create("psi")?;
    let mut seen = Vec::new();
    for res in ["cpu", "memory", "io"] {
        for path in [
            Path::new("/proc/pressure").join(res),
            cg.file(&format!("{res}.pressure")),
        ] {
            let text = read(&path)?;
            if !text.starts_with("some avg10=") {
                return Err(format!("{}: unexpected content {text:?}", path.display()));
            }
        }
        seen.push(res);
    }
    // The protection loop registers triggers: the fd must accept one (kept open while alive).
    for path in [
        PathBuf::from("/proc/pressure/memory"),
        cg.file("memory.pressure"),
    ] {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        f.write_all(b"some 150000 1000000\0")
            .map_err(|e| format!("PSI trigger on {}: {e}", path.display()))?;
    }
    Ok(format!(
        "/proc/pressure and cgroup *.pressure for {}; triggers accepted",
        seen.join(",")
    ))
}

fn check_bpffs_tracefs_btf() -> CheckResult {
    mount_of("bpf", "/sys/fs/bpf")?;
    let dir = Path::new("/sys/fs/bpf/daros-test-check");
    std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let _ = std::fs::remove_dir(dir);
    mount_of("tracefs", "/sys/kernel/tracing")?;
    if !Path::new("/sys/kernel/tracing/events/sched/sched_switch").is_dir() {
        return Err("tracefs has no sched/sched_switch event".into());
    }
    let btf = std::fs::metadata("/sys/kernel/btf/vmlinux")
        .map_err(|e| format!("/sys/kernel/btf/vmlinux: {e}"))?;
    Ok(format!(
        "bpffs writable, tracefs with sched events, BTF {} KiB",
        btf.len() >> 10
    ))
}

fn check_loopback() -> CheckResult {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let server = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let (mut s, _) = l.accept()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)?;
        Ok(buf)
    });
    let mut c = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    c.write_all(b"daros").map_err(|e| e.to_string())?;
    drop(c);
    match server.join() {
        Ok(Ok(got)) if got == b"daros" => Ok(format!("TCP over {addr}")),
        other => Err(format!("loopback TCP exchange failed: {other:?}")),
    }
}

fn check_tools() -> CheckResult {
    let mut versions = Vec::new();
    for (tool, package) in [("stress-ng", "stress-ng"), ("fio", "fio")] {
        let out = Command::new(tool).arg("--version").output();
        match out {
            Ok(o) if o.status.success() => {
                let v = String::from_utf8_lossy(&o.stdout);
                versions.push(v.lines().next().unwrap_or(tool).trim().to_owned());
            }
            _ => {
                return Err(format!(
                    "{tool} does not run in the guest: install the host package `{package}`"
                ));
            }
        }
    }
    Ok(versions.join("; "))
}

fn check_resources() -> CheckResult {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib = read("/proc/meminfo")?
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0);
    Ok(format!("{cpus} CPUs, {} MiB memory", mem_kib >> 10))
}

/// All checks, in order.
pub const CHECKS: &[Check] = &[
    ("in-vm", check_in_vm),
    ("cgroup2-only", check_cgroup2_only),
    ("controllers", check_controllers),
    ("knobs-read-back", check_knobs_read_back),
    ("pids-max-fork", check_pids_max_fork),
    ("io-max-throttles", check_io_max_throttles),
    ("block-device", check_block_device),
    ("psi", check_psi),
    ("bpffs-tracefs-btf", check_bpffs_tracefs_btf),
    ("loopback", check_loopback),
    ("stress-ng-fio", check_tools),
    ("resources", check_resources),
];

fn ensure_in_vm(flag: Option<&str>) -> Result<(), String> {
    if flag == Some("1") {
        return Ok(());
    }
    Err(format!(
        "guest-check only runs inside the daros VM ({ENV_IN_VM}=1): it writes cgroup files. \
         Use `daros-vmtest selftest` to boot the VM and run it there"
    ))
}

/// Runs every check (refusing outside the VM: they write cgroup files).
pub fn run_all() -> Result<Vec<CheckOutcome>, String> {
    ensure_in_vm(std::env::var(ENV_IN_VM).ok().as_deref())?;
    Ok(CHECKS
        .iter()
        .map(|(name, f)| {
            let t0 = Instant::now();
            let result = f();
            CheckOutcome {
                name,
                result,
                elapsed: t0.elapsed(),
            }
        })
        .collect())
}

/// Formats outcomes as `ok   name: detail` / `FAIL name: reason` lines plus a summary.
pub fn render(outcomes: &[CheckOutcome]) -> String {
    let mut s = String::new();
    for o in outcomes {
        let _ = match &o.result {
            Ok(d) => writeln!(s, "ok   {}: {d} [{:.2} s]", o.name, o.elapsed.as_secs_f64()),
            Err(e) => writeln!(s, "FAIL {}: {e} [{:.2} s]", o.name, o.elapsed.as_secs_f64()),
        };
    }
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    let _ = writeln!(
        s,
        "guest-check: {} passed, {failed} failed",
        outcomes.len() - failed
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_to_run_outside_the_vm() {
        for flag in [None, Some("0"), Some("yes")] {
            let err = ensure_in_vm(flag).unwrap_err();
            assert!(err.contains("only runs inside the daros VM"), "{err}");
        }
        assert!(ensure_in_vm(Some("1")).is_ok());
    }

    #[test]
    fn render_marks_failures_and_counts() {
        let out = render(&[
            CheckOutcome {
                name: "a",
                result: Ok("fine".into()),
                elapsed: Duration::from_millis(10),
            },
            CheckOutcome {
                name: "b",
                result: Err("broken".into()),
                elapsed: Duration::ZERO,
            },
        ]);
        let want =
            "ok   a: fine [0.01 s]\nFAIL b: broken [0.00 s]\nguest-check: 1 passed, 1 failed\n";
        assert_eq!(out, want);
    }
}
