//! What the adapter and its `daros-shim` tell each other, through files in
//! the run directory of one start (`<state>/run/<instance>/<generation>/`)
//! and one report line on the shim's stdout:
//!
//! - `shim.json` ([`ShimConfig`]): written by the adapter, read by the shim;
//! - `started.json` ([`StartedRecord`]) or `failed.json` ([`LaunchFailure`]):
//!   written by the shim once the workload was spawned (or could not be),
//!   and sent as the report line ([`ShimReport`]);
//! - `exit.json` ([`ExitRecord`]): written by the shim when the workload
//!   ended, before the shim exits. A restarted agent reads it to learn an
//!   exit it did not witness.
//!
//! Every file is written atomically (temporary file, fsync, rename, fsync of
//! the directory) so a crash never leaves half a record.

use crate::logs::LogLimits;
use crate::status::ExitStatus;
use daros_coordinator::model::time::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The shim's instructions.
pub const SHIM_CONFIG: &str = "shim.json";
/// Written when the workload process runs.
pub const STARTED: &str = "started.json";
/// Written when the workload could not be started.
pub const FAILED: &str = "failed.json";
/// Written when the workload ended.
pub const EXIT: &str = "exit.json";
/// The shim's own stderr.
pub const SHIM_LOG: &str = "shim.log";

/// What the shim runs and where it writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShimConfig {
    /// Instance id (for the shim's own messages).
    pub id: String,
    /// Run number.
    pub generation: u64,
    /// Absolute path of the program.
    pub program: PathBuf,
    /// argv[1..].
    pub args: Vec<String>,
    /// The whole environment of the workload.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: PathBuf,
    /// User to run as (`None`: the shim's own).
    pub uid: Option<u32>,
    /// Group to run as.
    pub gid: Option<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `cgroup.procs` files the workload joins before exec.
    pub cgroup_procs: Vec<PathBuf>,
    /// `oom_score_adj` for the workload.
    pub oom_score_adj: Option<i32>,
    /// Log directory of the instance.
    pub log_dir: PathBuf,
    /// Log rotation.
    pub log_limits: LogLimits,
    /// This run's directory.
    pub run_dir: PathBuf,
    /// Confinement of the workload (default: the default baseline).
    #[serde(default)]
    pub security: daros_coordinator::model::security::SecurityContext,
    /// Processes run beside the workload, in its cgroup, as its user,
    /// confined like it, into its log; restarted while it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<SidecarPlan>,
}

/// One sidecar, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SidecarPlan {
    /// Name (for messages).
    pub name: String,
    /// Absolute path of the program.
    pub program: PathBuf,
    /// argv[1..].
    pub args: Vec<String>,
    /// Its whole environment (the workload's, with its own on top).
    pub env: Vec<(String, String)>,
}

/// A process, identified beyond its pid by its start time (clock ticks
/// after boot, field 22 of `/proc/<pid>/stat`) so that a reused pid is not
/// mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentity {
    /// Pid.
    pub pid: u32,
    /// Start time in clock ticks after boot.
    pub start_time: u64,
}

impl ProcessIdentity {
    /// The identity of running process `pid`.
    pub fn of(pid: u32) -> io::Result<Self> {
        Ok(Self {
            pid,
            start_time: process_start_time(pid)?,
        })
    }
}

/// The workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedRecord {
    /// The shim.
    pub shim: ProcessIdentity,
    /// The workload process (leader of its process group).
    pub child: ProcessIdentity,
    /// When it was spawned.
    pub started_at: Timestamp,
}

/// The workload could not be started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchFailure {
    /// The step that failed.
    pub stage: String,
    /// OS error number, when there is one.
    pub errno: Option<i32>,
    /// What went wrong.
    pub message: String,
}

/// The shim's one report line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShimReport {
    /// Spawned.
    Started(StartedRecord),
    /// Not spawned.
    Failed(LaunchFailure),
}

/// How the workload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitRecord {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// When the shim saw it.
    pub finished_at: Timestamp,
}

/// Writes `value` as JSON to `path` atomically and durably.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads a JSON file; `None` when it does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(d) => serde_json::from_slice(&d).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Start time of `pid` in clock ticks after boot.
pub fn process_start_time(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat unreadable"),
        )
    })
}

fn parse_start_time(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields resume
    // after the last ')'; starttime is field 22, the 20th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_parses_odd_command_names() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(parse_start_time(stat), Some(123_456));
        let me = process_start_time(std::process::id()).unwrap();
        assert!(me > 0);
        assert_eq!(
            ProcessIdentity::of(std::process::id()).unwrap().start_time,
            me
        );
    }

    #[test]
    fn atomic_json_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(EXIT);
        assert_eq!(read_json::<ExitRecord>(&p).unwrap(), None);
        let rec = ExitRecord {
            status: ExitStatus {
                code: Some(3),
                signal: None,
            },
            finished_at: Timestamp(5),
        };
        write_json_atomic(&p, &rec).unwrap();
        assert_eq!(read_json::<ExitRecord>(&p).unwrap(), Some(rec));
        assert!(!p.with_extension("tmp").exists());
        fs::write(&p, b"{").unwrap();
        assert_eq!(
            read_json::<ExitRecord>(&p).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
