//! Whose port is it: an http or tcp probe of a process instance on the host
//! network proves only that *something* answers on the port. While an old
//! copy of the replica still serves it (a surge rollout, a copy still
//! stopping), the new copy would look ready without having bound anything.
//! So before such a probe counts, one of the instance's own processes (those
//! in its cgroups) must hold a listening TCP socket on the port: the
//! listening sockets' inodes from `/proc/net/tcp{,6}`, matched against the
//! `socket:[inode]` links in `/proc/PID/fd` (what `ss -lp` does).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// TCP state LISTEN in `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// Inodes of the listening TCP sockets on `port` (IPv4 and IPv6) in
/// `proc_net` (normally `/proc/net`).
pub fn listening_inodes(proc_net: &Path, port: u16) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for f in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(proc_net.join(f)) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(st), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let p = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *st == LISTEN
                && p == Some(port)
                && let Ok(i) = inode.parse::<u64>()
                && i != 0
            {
                out.insert(i);
            }
        }
    }
    out
}

/// Pids listed in the `cgroup.procs` files.
fn pids(procs_files: &[PathBuf]) -> BTreeSet<u32> {
    procs_files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// True when a process of `pid` holds one of `inodes` open.
fn holds(proc_root: &Path, pid: u32, inodes: &BTreeSet<u64>) -> bool {
    let Ok(dir) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return false;
    };
    dir.filter_map(Result::ok).any(|e| {
        std::fs::read_link(e.path()).is_ok_and(|l| {
            l.to_str()
                .and_then(|s| s.strip_prefix("socket:["))
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|i| inodes.contains(&i))
        })
    })
}

/// `Ok` when a process of the instance (listed in `procs_files`) listens on
/// `port`, else why not. With no `procs_files` (the instance's cgroups are
/// unknown) there is nothing to check against: `Ok`.
pub fn check_listener(port: u16, procs_files: &[PathBuf]) -> Result<(), String> {
    if procs_files.is_empty() {
        return Ok(());
    }
    let proc_root = Path::new("/proc");
    let inodes = listening_inodes(&proc_root.join("net"), port);
    if inodes.is_empty() {
        return Err(format!("nothing listens on port {port}"));
    }
    if pids(procs_files)
        .into_iter()
        .any(|pid| holds(proc_root, pid, &inodes))
    {
        Ok(())
    } else {
        Err(format!(
            "port {port} is served by another process, not by this instance (none of its processes listens on it)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn procs_file_of_self(dir: &Path) -> PathBuf {
        let f = dir.join("cgroup.procs");
        std::fs::write(&f, format!("{}\n", std::process::id())).unwrap();
        f
    }

    #[test]
    fn a_listener_of_ours_is_found_and_one_of_another_process_is_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let ours = procs_file_of_self(dir.path());
        assert!(!listening_inodes(Path::new("/proc/net"), port).is_empty());
        assert_eq!(check_listener(port, &[ours]), Ok(()));

        // The same port checked for a "cgroup" holding only pid 1 (not us).
        let other = dir.path().join("other.procs");
        std::fs::write(&other, "1\n").unwrap();
        let e = check_listener(port, std::slice::from_ref(&other)).unwrap_err();
        assert!(e.contains("not by this instance"), "{e}");

        drop(l);
        let e = check_listener(port, &[other]).unwrap_err();
        assert_eq!(e, format!("nothing listens on port {port}"));
        // Unknown cgroups: nothing to check against.
        assert_eq!(check_listener(port, &[]), Ok(()));
    }
}
