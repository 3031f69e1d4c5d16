//! The whole disk behind a directory, and what identifies it (a cached model
//! is only used for the same disk).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A whole disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Kernel name (`vda`, `nvme0n1`).
    pub name: String,
    /// Size in 512-byte sectors.
    pub sectors: u64,
    /// `device/model` from sysfs, where the driver has one.
    pub model: String,
}

impl Device {
    /// `MAJ:MIN`.
    pub fn dev(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }

    /// The disk `major:minor` from `sys` (`/sys`).
    pub fn read(sys: &Path, major: u32, minor: u32) -> Option<Device> {
        let dir = std::fs::canonicalize(sys.join(format!("dev/block/{major}:{minor}"))).ok()?;
        let name = dir.file_name()?.to_string_lossy().into_owned();
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Some(Device {
            major,
            minor,
            name,
            sectors: read("size").parse().unwrap_or(0),
            model: read("device/model"),
        })
    }
}

/// The whole disk holding `dir`'s filesystem (a partition's disk), or why none.
pub fn disk_of(sys: &Path, dir: &Path) -> Result<Device, String> {
    let st = rustix::fs::stat(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let node: PathBuf = sys.join(format!("dev/block/{major}:{minor}"));
    let Ok(real) = std::fs::canonicalize(&node) else {
        return Err(format!(
            "{} is not on a disk (its device {major}:{minor} is no block device: tmpfs, overlay or a network filesystem)",
            dir.display()
        ));
    };
    // A partition's directory sits inside its disk's.
    let disk = if real.join("partition").exists() {
        real.parent().map(Path::to_path_buf).unwrap_or(real)
    } else {
        real
    };
    let dev = std::fs::read_to_string(disk.join("dev"))
        .map_err(|e| format!("{}: {e}", disk.display()))?;
    let (a, b) = dev
        .trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| format!("{}/dev: {dev:?}", disk.display()))?;
    Device::read(sys, a, b).ok_or_else(|| format!("no /sys/dev/block/{a}:{b}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_on_a_partition_names_its_whole_disk() {
        // The build directory is on a disk on the machines this runs on.
        let d = disk_of(
            Path::new("/sys"),
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")),
        )
        .unwrap();
        assert!(!Path::new(&format!("/sys/block/{}/partition", d.name)).exists());
        assert!(
            Path::new(&format!("/sys/block/{}", d.name)).exists(),
            "{d:?}"
        );
        assert!(d.sectors > 0, "{d:?}");
        let again = Device::read(Path::new("/sys"), d.major, d.minor).unwrap();
        assert_eq!(again, d);
    }

    #[test]
    fn proc_is_on_no_disk() {
        let e = disk_of(Path::new("/sys"), Path::new("/proc")).unwrap_err();
        assert!(e.contains("is not on a disk"), "{e}");
    }
}
