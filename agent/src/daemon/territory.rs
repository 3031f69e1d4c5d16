//! One agent per territory. A node's managed cgroup root, eBPF pin
//! directory, API socket and data dir each belong to exactly one running
//! darosd: two agents on the same managed root or pin directory silently
//! fought over the same workloads (a second agent attached its network
//! programs to the first one's cgroups and left them attached when it
//! exited). Before touching any of them, darosd takes an exclusive `flock`
//! per part, in one fixed directory every agent of the node agrees on, and
//! writes who it is into the lock file; a second agent on any part exits
//! naming the first. The kernel drops the locks when the holder dies, even
//! by SIGKILL, and the files are opened close-on-exec so no workload or
//! shim inherits them.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

/// Where the locks live (tmpfs: gone at boot, like the agents).
pub const LOCK_DIR: &str = "/run/daros/territory";

/// How long a claim waits for a part that is held: a previous agent
/// (a restart) may still be exiting.
pub const WAIT: Duration = Duration::from_secs(2);

/// One part of the territory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The configuration key that chooses it (`cgroup.managed_root`).
    pub key: &'static str,
    /// Its value (a cgroup name or an absolute path).
    pub value: String,
}

impl Part {
    /// The lock file's name: the key and the value, `/` and `%` escaped.
    fn file_name(&self) -> String {
        let v: String = self
            .value
            .chars()
            .map(|c| match c {
                '/' => "%2F".to_string(),
                '%' => "%25".to_string(),
                c => c.to_string(),
            })
            .collect();
        format!("{}={v}.lock", self.key)
    }
}

/// Errors claiming the territory.
#[derive(Debug, thiserror::Error)]
pub enum TerritoryError {
    /// Another agent holds a part.
    #[error(
        "{key} {value:?} is held by another darosd ({holder}); stop it, or give this agent its own {key}"
    )]
    Held {
        /// Configuration key of the part.
        key: &'static str,
        /// Its value.
        value: String,
        /// What the holder wrote about itself.
        holder: String,
    },
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// Path involved.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
}

/// The claimed territory: held until dropped (or the process ends).
#[derive(Debug)]
pub struct Territory {
    _locks: Vec<File>,
}

/// Claims every part in `dir` for the holder described by `me`, or none.
pub fn claim(dir: &Path, parts: &[Part], me: &str) -> Result<Territory, TerritoryError> {
    let io_err = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| TerritoryError::Io { op, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    let mut locks = Vec::with_capacity(parts.len());
    for part in parts {
        let path = dir.join(part.file_name());
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("opening", &path))?;
        let deadline = Instant::now() + WAIT;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(e) if io::Error::from(e).kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let mut holder = String::new();
                        let _ = file.read_to_string(&mut holder);
                        let holder = holder.trim();
                        return Err(TerritoryError::Held {
                            key: part.key,
                            value: part.value.clone(),
                            holder: if holder.is_empty() {
                                "it has not said who it is yet".into()
                            } else {
                                holder.to_string()
                            },
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io_err("locking", &path)(e.into())),
            }
        }
        file.set_len(0).map_err(io_err("truncating", &path))?;
        file.rewind().map_err(io_err("rewinding", &path))?;
        file.write_all(me.as_bytes())
            .map_err(io_err("writing", &path))?;
        locks.push(file);
    }
    Ok(Territory { _locks: locks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Vec<Part> {
        vec![
            Part {
                key: "cgroup.managed_root",
                value: "daros-test-territory".into(),
            },
            Part {
                key: "net.pin_dir",
                value: "/sys/fs/bpf/x%y".into(),
            },
        ]
    }

    #[test]
    fn a_second_claim_on_any_part_names_the_holder_and_takes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim(dir.path(), &parts(), "darosd pid 1, socket /a").unwrap();
        // Overlapping in one part only: refused, naming the holder.
        let other = vec![
            Part {
                key: "cgroup.managed_root",
                value: "elsewhere".into(),
            },
            parts()[1].clone(),
        ];
        let t0 = Instant::now();
        let e = claim(dir.path(), &other, "darosd pid 2").unwrap_err();
        assert!(t0.elapsed() >= WAIT);
        let msg = e.to_string();
        assert!(msg.contains("net.pin_dir \"/sys/fs/bpf/x%y\""), "{msg}");
        assert!(msg.contains("darosd pid 1, socket /a"), "{msg}");
        // The part it did get was let go with the failed claim.
        drop(claim(dir.path(), &other[..1], "darosd pid 3").unwrap());
        drop(first);
        // Released: claimed again, and the new holder is written.
        let _again = claim(dir.path(), &parts(), "darosd pid 4").unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"net.pin_dir=%2Fsys%2Ffs%2Fbpf%2Fx%25y.lock".to_string()),
            "{names:?}"
        );
        let text = std::fs::read_to_string(
            dir.path()
                .join("cgroup.managed_root=daros-test-territory.lock"),
        )
        .unwrap();
        assert_eq!(text, "darosd pid 4");
    }
}
