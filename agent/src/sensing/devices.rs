//! Block device names: whole disks from `/sys/block`, and `MAJ:MIN` → name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A whole block device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Kernel name.
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// Lists whole disks under `sys_block` (normally `/sys/block`) whose names do not
/// start with one of `exclude`.
pub fn whole_disks(sys_block: &Path, exclude: &[String]) -> Vec<Disk> {
    let Ok(rd) = std::fs::read_dir(sys_block) else {
        return Vec::new();
    };
    let mut out: Vec<Disk> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if exclude.iter().any(|p| name.starts_with(p.as_str())) {
                return None;
            }
            let dev = std::fs::read_to_string(e.path().join("dev")).ok()?;
            let (ma, mi) = dev.trim().split_once(':')?;
            Some(Disk {
                name,
                major: ma.parse().ok()?,
                minor: mi.parse().ok()?,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Caches `MAJ:MIN` → kernel name lookups through `/sys/dev/block`.
#[derive(Debug)]
pub struct DeviceNames {
    root: PathBuf,
    cache: HashMap<(u32, u32), Option<String>>,
}

impl Default for DeviceNames {
    fn default() -> Self {
        Self::new(PathBuf::from("/sys/dev/block"))
    }
}

impl DeviceNames {
    /// Looks names up under `root` (normally `/sys/dev/block`).
    pub fn new(root: PathBuf) -> Self {
        DeviceNames {
            root,
            cache: HashMap::new(),
        }
    }

    /// The kernel name of a device, if it exists.
    pub fn name(&mut self, major: u32, minor: u32) -> Option<String> {
        let root = &self.root;
        self.cache
            .entry((major, minor))
            .or_insert_with(|| {
                let uevent =
                    std::fs::read_to_string(root.join(format!("{major}:{minor}")).join("uevent"))
                        .ok()?;
                uevent
                    .lines()
                    .find_map(|l| l.strip_prefix("DEVNAME="))
                    .map(str::to_string)
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_names_this_hosts_disks() {
        let disks = whole_disks(
            Path::new("/sys/block"),
            &["loop".into(), "ram".into(), "zram".into()],
        );
        let mut names = DeviceNames::default();
        for d in &disks {
            assert!(!d.name.starts_with("loop"));
            assert_eq!(
                names.name(d.major, d.minor).as_deref(),
                Some(d.name.as_str())
            );
        }
        assert_eq!(names.name(4095, 4095), None);
    }
}
