//! Pressure stall files of a cgroup2 directory (also present in the bare unified
//! mount of hybrid hosts).

use std::path::Path;

use crate::cgroup::fs::{CgroupError, OpenMode, StatFile};
use crate::cgroup::parse::psi;
use crate::cgroup::stats::PsiStats;

/// CPU pressure.
pub const CPU: &str = "cpu.pressure";
/// Memory pressure.
pub const MEMORY: &str = "memory.pressure";
/// IO pressure.
pub const IO: &str = "io.pressure";

/// Open pressure files of one cgroup2 directory.
#[derive(Debug)]
pub struct PsiFiles {
    cpu: Option<StatFile>,
    memory: Option<StatFile>,
    io: Option<StatFile>,
}

impl PsiFiles {
    /// Opens whichever pressure files exist in `dir`.
    pub fn open(dir: &Path, mode: OpenMode) -> Result<Self, CgroupError> {
        Ok(PsiFiles {
            cpu: mode.open_optional(dir.join(CPU))?,
            memory: mode.open_optional(dir.join(MEMORY))?,
            io: mode.open_optional(dir.join(IO))?,
        })
    }

    /// True if no pressure file exists (kernel without PSI or `psi=0`).
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none() && self.io.is_none()
    }

    /// Reads all open pressure files.
    pub fn read(&mut self, buf: &mut Vec<u8>, out: &mut PsiStats) -> Result<(), CgroupError> {
        out.cpu = read_one(&mut self.cpu, buf)?;
        out.memory = read_one(&mut self.memory, buf)?;
        out.io = read_one(&mut self.io, buf)?;
        Ok(())
    }
}

fn read_one(
    f: &mut Option<StatFile>,
    buf: &mut Vec<u8>,
) -> Result<Option<crate::cgroup::parse::Psi>, CgroupError> {
    match f {
        None => Ok(None),
        Some(f) => {
            f.read_into(buf)?;
            Ok(psi(buf))
        }
    }
}
