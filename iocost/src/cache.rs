//! Measured models kept in the agent's data directory: a calibration runs once
//! per disk, again only when the disk changes or the file is removed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::calibrate::Measured;
use crate::device::Device;
use crate::error::IoCostError;

/// Directory of the cache under the data directory.
pub const DIR: &str = "iocost";

/// One disk's measured model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cached {
    /// The disk it was measured on.
    pub device: Device,
    /// The measurement.
    pub measured: Measured,
    /// When (Unix ms).
    pub at_unix_ms: u64,
}

/// Where `device`'s model is kept.
pub fn path(data_dir: &Path, device: &Device) -> PathBuf {
    data_dir
        .join(DIR)
        .join(format!("model-{}.json", device.name))
}

/// The cached model of `device`, if one was measured on this same disk
/// (name, size and model); an unreadable file counts as none.
pub fn load(data_dir: &Path, device: &Device) -> Option<Cached> {
    let text = std::fs::read(path(data_dir, device)).ok()?;
    let c: Cached = serde_json::from_slice(&text).ok()?;
    (c.device == *device).then_some(c)
}

/// Stores `c` (written to a temporary file and renamed, then synced).
pub fn store(data_dir: &Path, c: &Cached) -> Result<(), IoCostError> {
    let p = path(data_dir, &c.device);
    write_atomic(&p, &serde_json::to_vec_pretty(c).unwrap_or_default())
}

pub(crate) fn write_atomic(p: &Path, bytes: &[u8]) -> Result<(), IoCostError> {
    use std::io::Write;
    let dir = p.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| IoCostError::io(dir, "create", e))?;
    let tmp = p.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| IoCostError::io(&tmp, "create", e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| IoCostError::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, p).map_err(|e| IoCostError::io(p, "rename", e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LinearModel;

    fn cached(sectors: u64) -> Cached {
        Cached {
            device: Device {
                major: 254,
                minor: 0,
                name: "vda".into(),
                sectors,
                model: String::new(),
            },
            measured: Measured {
                model: LinearModel {
                    rbps: 1,
                    rseqiops: 2,
                    rrandiops: 3,
                    wbps: 4,
                    wseqiops: 5,
                    wrandiops: 6,
                },
                idle_latency: None,
                file_bytes: 32 << 20,
                took_ms: 9000,
            },
            at_unix_ms: 7,
        }
    }

    #[test]
    fn a_model_is_used_only_for_the_disk_it_was_measured_on() {
        let d = tempfile::tempdir().unwrap();
        let c = cached(1000);
        store(d.path(), &c).unwrap();
        assert_eq!(load(d.path(), &c.device), Some(c.clone()));
        // The same name on a disk of another size: measure again.
        assert_eq!(load(d.path(), &cached(2000).device), None);
        std::fs::write(path(d.path(), &c.device), "{").unwrap();
        assert_eq!(load(d.path(), &c.device), None);
    }
}
