//! The `storage` trait: named volumes of a fixed size, one per replica (init
//! jobs use replica 0's), kept on the node across restarts, new versions,
//! stop and start and agent restarts, until an operator deletes them.
//!
//! ```yaml
//! traits:
//! - type: storage
//!   properties:
//!     volumes:
//!     - {name: data, size: 256Mi}
//! ```
//!
//! For the process runtime a volume is an ext4 file system of `size` bytes on
//! a loop device (writes beyond it fail with ENOSPC), mounted under the
//! agent's data directory; the process finds it in `DAROS_VOLUME_<NAME>`
//! (upper case, `-` as `_`), owned by its user and writable under a
//! read-only root. A volume stays on its node: a replica placed elsewhere
//! starts with an empty one.

use super::TraitHandler;
use crate::field::FieldError;
use crate::model::resources::Bytes;
use crate::model::runtime::RuntimeType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The `storage` trait's handler.
pub struct StorageTrait;

/// Smallest volume: ext4's own metadata needs a few MiB.
pub const MIN_SIZE: Bytes = Bytes::from_mib(8);
/// Largest volume (sparse on the node until written).
pub const MAX_SIZE: Bytes = Bytes::from_gib(1024);
/// Most volumes per workload.
const MAX_VOLUMES: usize = 16;

/// `properties` of the `storage` trait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageProperties {
    /// The volumes.
    pub volumes: Vec<VolumeSpec>,
}

/// One named volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    /// Name, unique within the workload (a DNS label).
    pub name: String,
    /// Its size: a hard limit.
    pub size: Bytes,
}

impl VolumeSpec {
    /// The variable that names its directory: `DAROS_VOLUME_` and the name
    /// in upper case with `-` as `_`.
    pub fn env_name(&self) -> String {
        format!(
            "DAROS_VOLUME_{}",
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }
}

fn parse(properties: &serde_json::Value, path: &str) -> Result<StorageProperties, FieldError> {
    super::read_properties(properties, path)
}

impl TraitHandler for StorageTrait {
    fn name(&self) -> &'static str {
        "storage"
    }

    // The Kubernetes adapter would create PersistentVolumeClaims; until it
    // does, it refuses the trait.
    fn runtimes(&self) -> &'static [RuntimeType] {
        &[RuntimeType::Process]
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        let p = match parse(properties, path) {
            Ok(p) => p,
            Err(e) => return vec![e],
        };
        let mut errors = Vec::new();
        if p.volumes.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.volumes"),
                "name at least one volume",
            ));
        }
        if p.volumes.len() > MAX_VOLUMES {
            errors.push(FieldError::new(
                format!("{path}.volumes"),
                format!("{} volumes; at most {MAX_VOLUMES}", p.volumes.len()),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, v) in p.volumes.iter().enumerate() {
            let at = format!("{path}.volumes[{i}]");
            errors.extend(crate::model::names::check_name(
                &format!("{at}.name"),
                &v.name,
            ));
            if !seen.insert(v.name.as_str()) {
                errors.push(FieldError::new(
                    format!("{at}.name"),
                    format!("duplicate volume name {:?}", v.name),
                ));
            }
            if v.size < MIN_SIZE || v.size > MAX_SIZE {
                errors.push(FieldError::new(
                    format!("{at}.size"),
                    format!("{} is outside {MIN_SIZE}..={MAX_SIZE}", v.size),
                ));
            }
        }
        errors
    }
}

/// The volumes the `storage` trait among `traits` asks for.
pub fn volumes(traits: &[super::Trait]) -> Vec<VolumeSpec> {
    super::properties_of::<StorageProperties>(traits, StorageTrait.name())
        .map(|p| p.volumes)
        .unwrap_or_default()
}
