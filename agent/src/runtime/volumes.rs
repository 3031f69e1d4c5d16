//! Volumes of the `storage` trait on this node: each an ext4 file system in a
//! sparse image file of the asked size, mounted through a loop device, so the
//! size is a hard limit (writes beyond it fail with ENOSPC). Image
//! `<runtime.volume_dir>/<id>.img`, mount point `<runtime.volume_dir>/<id>`. A volume
//! outlives its instances, new versions, stop and start and agent restarts
//! (the mount stays; after a reboot it is mounted again on next use) until
//! an operator deletes it (`DELETE /v1/volumes/{id}`).

use std::path::{Path, PathBuf};
use std::process::Command;

use daros_adapters::VolumeMount;
use daros_coordinator::traits::storage::VolumeSpec;
use serde::{Deserialize, Serialize};

use super::target::Subject;

/// A volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// No such volume.
    #[error("no volume {0:?}")]
    NotFound(String),
    /// Not a volume id.
    #[error("volume id {0:?}: expected tenant.app.workload.replica.name (names are DNS labels)")]
    BadId(String),
    /// Asked with a size other than the one it has.
    #[error(
        "volume {id} exists with {has} bytes, asked for {asked}: sizes do not change (delete the volume to make it anew)"
    )]
    SizeChanged {
        /// Volume.
        id: String,
        /// Its size.
        has: u64,
        /// Asked.
        asked: u64,
    },
    /// In use by a running process (unmount refused).
    #[error("volume {0} is in use (a process of its instance still runs)")]
    Busy(String),
    /// A command or file operation failed.
    #[error("volume {id}: {what}: {detail}")]
    Os {
        /// Volume.
        id: String,
        /// What was done.
        what: String,
        /// Why it failed.
        detail: String,
    },
}

/// One volume as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeInfo {
    /// `tenant.app.workload.replica.name`.
    pub id: String,
    /// Size in bytes (the image's).
    pub size_bytes: u64,
    /// Bytes the image holds on disk.
    pub allocated_bytes: u64,
    /// Mounted now (where).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounted_at: Option<String>,
}

/// The node's volumes.
#[derive(Debug, Clone)]
pub struct Volumes {
    dir: PathBuf,
}

fn os(id: &str, what: &str, detail: impl std::fmt::Display) -> VolumeError {
    VolumeError::Os {
        id: id.to_string(),
        what: what.to_string(),
        detail: detail.to_string(),
    }
}

fn run(id: &str, what: &str, cmd: &mut Command) -> Result<(), VolumeError> {
    let out = cmd.output().map_err(|e| os(id, what, e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(os(
            id,
            what,
            format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ))
    }
}

/// Mount points of this mount namespace.
fn mount_points() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

impl Volumes {
    /// Volumes in `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// The id of `v` for `subject`: per replica (an init job uses replica
    /// 0's), the version left out so that new versions find the same data.
    pub fn id_of(subject: &Subject, v: &VolumeSpec) -> String {
        let (app, workload, replica) = match subject {
            Subject::Instance(i) => (&i.app, &i.workload, i.replica),
            Subject::Job(j) => (&j.app, &j.workload, 0),
        };
        format!(
            "{}.{}.{workload}.{replica}.{}",
            app.tenant, app.name, v.name
        )
    }

    fn check_id(id: &str) -> Result<(), VolumeError> {
        let parts: Vec<&str> = id.split('.').collect();
        let label = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        if parts.len() == 5 && parts.iter().all(|p| label(p)) {
            Ok(())
        } else {
            Err(VolumeError::BadId(id.to_string()))
        }
    }

    fn image(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.img"))
    }

    fn mount_point(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn mounted(&self, id: &str) -> bool {
        let mp = self.mount_point(id).display().to_string();
        mount_points().contains(&mp)
    }

    /// Makes `subject`'s volumes ready (created and formatted on first use,
    /// mounted) and returns where each is.
    pub fn prepare(
        &self,
        subject: &Subject,
        specs: &[VolumeSpec],
    ) -> Result<Vec<VolumeMount>, VolumeError> {
        specs
            .iter()
            .map(|v| {
                let id = Self::id_of(subject, v);
                let path = self.ensure(&id, v.size.0)?;
                Ok(VolumeMount {
                    name: v.name.clone(),
                    path,
                    env: v.env_name(),
                })
            })
            .collect()
    }

    fn ensure(&self, id: &str, size: u64) -> Result<PathBuf, VolumeError> {
        use std::os::unix::fs::PermissionsExt;
        Self::check_id(id)?;
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| os(id, "creating the volume directory", e))?;
        // Workload users traverse it to their mount point, and list nothing.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| os(id, "setting the volume directory's mode", e))?;
        let image = self.image(id);
        match std::fs::metadata(&image) {
            Ok(m) if m.len() != size => {
                return Err(VolumeError::SizeChanged {
                    id: id.to_string(),
                    has: m.len(),
                    asked: size,
                });
            }
            Ok(_) => {}
            Err(_) => {
                // Formatted under a temporary name: a crash never leaves a
                // half-made image under the real one.
                let tmp = self.dir.join(format!(".{id}.img.new"));
                let f = std::fs::File::create(&tmp).map_err(|e| os(id, "creating the image", e))?;
                f.set_len(size).map_err(|e| os(id, "sizing the image", e))?;
                drop(f);
                run(
                    id,
                    "formatting (mkfs.ext4)",
                    Command::new("mkfs.ext4")
                        .args(["-q", "-F", "-m", "0", "-L"])
                        .arg(&id[..id.len().min(16)])
                        .arg(&tmp),
                )?;
                std::fs::rename(&tmp, &image).map_err(|e| os(id, "naming the image", e))?;
            }
        }
        let mp = self.mount_point(id);
        if !self.mounted(id) {
            std::fs::create_dir_all(&mp).map_err(|e| os(id, "creating the mount point", e))?;
            run(
                id,
                "mounting",
                Command::new("mount")
                    .args(["-o", "loop,nodev,nosuid", "-t", "ext4"])
                    .arg(&image)
                    .arg(&mp),
            )?;
        }
        Ok(mp)
    }

    /// Every volume on this node.
    pub fn list(&self) -> Vec<VolumeInfo> {
        use std::os::unix::fs::MetadataExt;
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<VolumeInfo> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_suffix(".img")?.to_string();
                if name.starts_with('.') {
                    return None;
                }
                let m = e.metadata().ok()?;
                Some(VolumeInfo {
                    mounted_at: self
                        .mounted(&id)
                        .then(|| self.mount_point(&id).display().to_string()),
                    id,
                    size_bytes: m.len(),
                    allocated_bytes: m.blocks() * 512,
                })
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Unmounts and deletes a volume and its data; refused while a process
    /// uses it.
    pub fn delete(&self, id: &str) -> Result<(), VolumeError> {
        Self::check_id(id)?;
        let image = self.image(id);
        if !image.exists() {
            return Err(VolumeError::NotFound(id.to_string()));
        }
        let mp = self.mount_point(id);
        if self.mounted(id) {
            // Not lazy: a volume a process still holds stays, with its data.
            let out = Command::new("umount")
                .arg(&mp)
                .output()
                .map_err(|e| os(id, "unmounting", e))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                return Err(if err.contains("busy") {
                    VolumeError::Busy(id.to_string())
                } else {
                    os(id, "unmounting", err.trim())
                });
            }
        }
        let _ = std::fs::remove_dir(&mp);
        std::fs::remove_file(&image).map_err(|e| os(id, "removing the image", e))
    }
}
