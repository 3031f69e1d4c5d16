//! cgroup v2 backend: one unified tree with every controller.

pub mod core;
pub mod cpu;
pub mod cpuset;
pub mod io;
pub mod memory;
pub mod pids;
pub mod psi;

use std::path::{Path, PathBuf};

use super::fs::{self, CgroupError, OpenMode, StatFile};
use super::path::CgroupPath;
use super::stats::{CgroupStats, MemoryStats};
use psi::PsiFiles;

/// Controllers the agent enables for its managed subtree when the parent offers them.
pub const MANAGED_CONTROLLERS: &[&str] = &["cpu", "cpuset", "io", "memory", "pids"];

/// The v2 backend, rooted at the cgroup2 mount.
#[derive(Debug, Clone)]
pub struct V2Backend {
    root: PathBuf,
}

impl V2Backend {
    /// A backend for the cgroup2 tree mounted at `root`.
    pub fn new(root: PathBuf) -> Self {
        V2Backend { root }
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of `cg`.
    pub fn dir(&self, cg: &CgroupPath) -> PathBuf {
        cg.under(&self.root)
    }

    /// Controllers available in `cg` (its `cgroup.controllers`).
    pub fn controllers(&self, cg: &CgroupPath) -> Result<Vec<String>, CgroupError> {
        let text = fs::read_string(&self.dir(cg).join(core::CONTROLLERS))?;
        Ok(core::controller_list(&text))
    }

    /// Controllers enabled for the children of `cg`.
    pub fn subtree_control(&self, cg: &CgroupPath) -> Result<Vec<String>, CgroupError> {
        let text = fs::read_string(&self.dir(cg).join(core::SUBTREE_CONTROL))?;
        Ok(core::controller_list(&text))
    }

    /// Creates `cg` (and missing parents).
    pub fn create(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        fs::create_dir(&self.dir(cg))
    }

    /// Removes `cg`; fails while it has processes or children.
    pub fn remove(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        fs::remove_dir(&self.dir(cg))
    }

    /// Moves process `pid` into `cg`.
    pub fn add_pid(&self, cg: &CgroupPath, pid: u32) -> Result<(), CgroupError> {
        fs::write(&self.dir(cg).join(core::PROCS), &pid.to_string())
    }

    /// Enables, one by one, each controller of [`MANAGED_CONTROLLERS`] that `cg` offers
    /// for its children. Returns a note per controller that could not be enabled.
    pub fn enable_subtree(&self, cg: &CgroupPath) -> Result<Vec<String>, CgroupError> {
        let offered = self.controllers(cg)?;
        let enabled = self.subtree_control(cg)?;
        let file = self.dir(cg).join(core::SUBTREE_CONTROL);
        let mut notes = Vec::new();
        for c in MANAGED_CONTROLLERS {
            if enabled.iter().any(|e| e == c) {
                continue;
            }
            if !offered.iter().any(|o| o == c) {
                notes.push(format!(
                    "{c}: not offered to {cg} (enable it in the parent's {})",
                    core::SUBTREE_CONTROL
                ));
                continue;
            }
            if let Err(e) = fs::write(&file, &format!("+{c}")) {
                notes.push(format!("{c}: {e}"));
            }
        }
        Ok(notes)
    }
}

/// Open stat files of one v2 cgroup.
#[derive(Debug)]
pub struct V2Stats {
    cpu: StatFile,
    memory: Option<[StatFile; 3]>,
    io: Option<StatFile>,
    pids: Option<StatFile>,
    psi: PsiFiles,
    unavailable: Vec<(&'static str, String)>,
}

impl V2Stats {
    /// Opens the stat files of `dir`; `Gone` if the cgroup does not exist.
    pub fn open(dir: &Path, mode: OpenMode) -> Result<Self, CgroupError> {
        let cpu = mode.open(dir.join(cpu::STAT))?;
        let mut unavailable = Vec::new();
        let mut missing = |area: &'static str, ctrl: &str| {
            unavailable.push((
                area,
                format!(
                    "{ctrl} controller not enabled for this cgroup (parent's {} lacks it)",
                    core::SUBTREE_CONTROL
                ),
            ));
        };
        let memory = match mode.open_optional(dir.join(memory::CURRENT))? {
            Some(current) => Some([
                current,
                mode.open(dir.join(memory::STAT))?,
                mode.open(dir.join(memory::EVENTS))?,
            ]),
            None => {
                missing("memory", "memory");
                None
            }
        };
        let io = mode.open_optional(dir.join(io::STAT))?;
        if io.is_none() {
            missing("io", "io");
        }
        let pids = mode.open_optional(dir.join(pids::CURRENT))?;
        if pids.is_none() {
            missing("pids", "pids");
        }
        let psi = PsiFiles::open(dir, mode)?;
        if psi.is_empty() {
            unavailable.push((
                "psi",
                "kernel reports no pressure files (CONFIG_PSI off or psi=0)".into(),
            ));
        }
        Ok(V2Stats {
            cpu,
            memory,
            io,
            pids,
            psi,
            unavailable,
        })
    }

    /// What this cgroup cannot report, with the reason.
    pub fn unavailable(&self) -> &[(&'static str, String)] {
        &self.unavailable
    }

    /// Reads every open file into `out`.
    pub fn read(&mut self, buf: &mut Vec<u8>, out: &mut CgroupStats) -> Result<(), CgroupError> {
        self.cpu.read_into(buf)?;
        out.cpu = cpu::parse_stat(buf);
        if out.cpu.is_none() {
            return Err(CgroupError::Parse {
                path: self.cpu.path().to_path_buf(),
                reason: "no usage_usec".into(),
            });
        }
        out.memory = match &mut self.memory {
            Some([current, stat, events]) => {
                let current = current.read_u64(buf)?;
                stat.read_into(buf)?;
                let (anon, file) = memory::parse_stat(buf);
                events.read_into(buf)?;
                Some(MemoryStats {
                    current,
                    anon,
                    file,
                    events: memory::parse_events(buf),
                })
            }
            None => None,
        };
        match &mut self.io {
            Some(f) => {
                f.read_into(buf)?;
                io::parse_stat(buf, out.io.get_or_insert_with(Vec::new));
            }
            None => out.io = None,
        }
        out.pids = match &mut self.pids {
            Some(f) => Some(f.read_u64(buf)?),
            None => None,
        };
        self.psi.read(buf, &mut out.psi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lays out a directory with real v2 file contents (as on a v2 kernel with
    /// cpu, io, memory and pids enabled) and reads it through the v2 reader.
    #[test]
    fn reads_a_v2_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let files: &[(&str, &str)] = &[
            (
                "cpu.stat",
                "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\nnice_usec 0\nnr_periods 10\nnr_throttled 2\nthrottled_usec 30000\nnr_bursts 0\nburst_usec 0\n",
            ),
            ("memory.current", "73400320\n"),
            ("memory.stat", "anon 67108864\nfile 6291456\nkernel 0\n"),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 4\noom 0\noom_kill 0\noom_group_kill 0\n",
            ),
            (
                "io.stat",
                "254:0 rbytes=4096 wbytes=33554432 rios=1 wios=32 dbytes=0 dios=0\n",
            ),
            ("pids.current", "3\n"),
            (
                "cpu.pressure",
                "some avg10=1.50 avg60=0.20 avg300=0.05 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
            (
                "io.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=77\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=70\n",
            ),
        ];
        for (name, content) in files {
            std::fs::write(d.join(name), content).unwrap();
        }
        for mode in [OpenMode::KeepOpen, OpenMode::Reopen] {
            let mut r = V2Stats::open(d, mode).unwrap();
            assert!(r.unavailable().is_empty(), "{:?}", r.unavailable());
            let mut buf = Vec::new();
            let mut s = CgroupStats::default();
            r.read(&mut buf, &mut s).unwrap();
            let cpu = s.cpu.unwrap();
            assert_eq!(cpu.usage_ns, 2_000_000_000);
            assert_eq!(cpu.throttling.unwrap().throttled_periods, 2);
            let mem = s.memory.unwrap();
            assert_eq!(
                (mem.current, mem.anon, mem.file),
                (73_400_320, 67_108_864, 6_291_456)
            );
            assert_eq!(mem.events.max, Some(4));
            let io = s.io.unwrap();
            assert_eq!(
                (io[0].major, io[0].minor, io[0].wbytes, io[0].wios),
                (254, 0, 33_554_432, 32)
            );
            assert_eq!(s.pids, Some(3));
            assert_eq!(s.psi.cpu.unwrap().some.total_us, 123_456);
            assert_eq!(s.psi.io.unwrap().full.unwrap().total_us, 70);
        }
    }

    #[test]
    fn controllers_missing_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 1\nuser_usec 1\nsystem_usec 0\n",
        )
        .unwrap();
        let mut r = V2Stats::open(dir.path(), OpenMode::KeepOpen).unwrap();
        let areas: Vec<_> = r.unavailable().iter().map(|(a, _)| *a).collect();
        assert_eq!(areas, vec!["memory", "io", "pids", "psi"]);
        let mut s = CgroupStats::default();
        r.read(&mut Vec::new(), &mut s).unwrap();
        assert!(s.memory.is_none() && s.io.is_none() && s.pids.is_none());
        assert_eq!(s.cpu.unwrap().usage_ns, 1000);
    }

    #[test]
    fn removed_cgroup_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let err = V2Stats::open(&dir.path().join("missing"), OpenMode::KeepOpen).unwrap_err();
        assert!(err.is_gone());
    }
}
