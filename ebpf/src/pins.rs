//! Reusing what an earlier run pinned: the meta map says which ABI and which exact build
//! created the pins; every pinned map is checked for the shape this build expects before use.

use std::path::{Path, PathBuf};

use aya::maps::{Array, Map, MapData, MapType};

use crate::{
    abi::Meta,
    error::{Error, Result},
};

/// What a start found in the pin directory, and therefore did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum OpenOutcome {
    /// Nothing was pinned: programs loaded, maps created, everything pinned.
    Fresh,
    /// The pins of this same build were reopened; counters and configuration kept.
    Reopened,
    /// Pins of another build with the same map layout: maps kept, programs replaced in place.
    Upgraded {
        /// object hash of the previous build
        previous: u64,
    },
    /// Incompatible or partial pins were removed and everything loaded fresh.
    Replaced {
        /// why the old pins could not be reused
        reason: String,
    },
}

/// The shape of a map as this build defines it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapShape {
    pub name: &'static str,
    pub kind: MapType,
    pub key: u32,
    pub value: u32,
    /// None: the kernel or the loader decides (ring buffers, overridable sizes).
    pub max_entries: Option<u32>,
}

/// Verdict on a pin directory.
#[derive(Debug)]
pub(crate) enum PinState {
    Missing,
    Current,
    SameAbi { previous: u64 },
    Incompatible { reason: String },
}

pub(crate) fn map_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

pub(crate) fn prog_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("prog_{name}"))
}

pub(crate) fn link_dir(dir: &Path) -> PathBuf {
    dir.join("links")
}

/// Opens a pinned map and checks its type, key/value sizes and capacity.
pub(crate) fn open_map(dir: &Path, shape: &MapShape) -> Result<MapData> {
    let path = map_path(dir, shape.name);
    let data = MapData::from_pin(&path).map_err(|e| Error::map(shape.name, "opening pin", e))?;
    let info = data
        .info()
        .map_err(|e| Error::map(shape.name, "reading info", e))?;
    let kind = info
        .map_type()
        .map_err(|e| Error::map(shape.name, "reading type", e))?;
    let mut problems = Vec::new();
    if kind != shape.kind {
        problems.push(format!("type {kind:?}, expected {:?}", shape.kind));
    }
    if info.key_size() != shape.key {
        problems.push(format!(
            "key size {}, expected {}",
            info.key_size(),
            shape.key
        ));
    }
    if info.value_size() != shape.value {
        problems.push(format!(
            "value size {}, expected {}",
            info.value_size(),
            shape.value
        ));
    }
    if let Some(max) = shape.max_entries
        && info.max_entries() != max
    {
        problems.push(format!(
            "max_entries {}, expected {max}",
            info.max_entries()
        ));
    }
    if problems.is_empty() {
        Ok(data)
    } else {
        Err(Error::Incompatible {
            path,
            reason: problems.join(", "),
        })
    }
}

pub(crate) fn read_meta(dir: &Path, name: &'static str) -> Result<Meta> {
    let path = map_path(dir, name);
    let data = MapData::from_pin(&path).map_err(|e| Error::map(name, "opening pin", e))?;
    let array: Array<MapData, Meta> =
        Array::try_from(Map::Array(data)).map_err(|e| Error::map(name, "typing", e))?;
    array.get(&0, 0).map_err(|e| Error::map(name, "reading", e))
}

pub(crate) fn write_meta(dir: &Path, name: &'static str, meta: &Meta) -> Result<()> {
    let path = map_path(dir, name);
    let data = MapData::from_pin(&path).map_err(|e| Error::map(name, "opening pin", e))?;
    let mut array: Array<MapData, Meta> =
        Array::try_from(Map::Array(data)).map_err(|e| Error::map(name, "typing", e))?;
    array
        .set(0, meta, 0)
        .map_err(|e| Error::map(name, "writing", e))
}

/// Decides whether the pins in `dir` can be reused by a build with `abi` and `hash`.
pub(crate) fn inspect(
    dir: &Path,
    meta_name: &'static str,
    abi: u32,
    hash: u64,
    max_slots: u32,
    shapes: &[MapShape],
    programs: &[&str],
) -> PinState {
    if !dir.exists() {
        return PinState::Missing;
    }
    let meta = match read_meta(dir, meta_name) {
        Ok(m) => m,
        Err(e) => {
            return PinState::Incompatible {
                reason: format!("no readable meta map ({e})"),
            };
        }
    };
    if meta.abi != abi {
        return PinState::Incompatible {
            reason: format!(
                "map layout version {} pinned, this build uses {abi}",
                meta.abi
            ),
        };
    }
    if meta.max_slots != max_slots {
        return PinState::Incompatible {
            reason: format!("{} slots pinned, {max_slots} requested", meta.max_slots),
        };
    }
    for shape in shapes {
        if let Err(e) = open_map(dir, shape) {
            return PinState::Incompatible {
                reason: e.to_string(),
            };
        }
    }
    if meta.object_hash == hash {
        for p in programs {
            if !prog_path(dir, p).exists() {
                return PinState::Incompatible {
                    reason: format!("program pin {p} missing"),
                };
            }
        }
        PinState::Current
    } else {
        PinState::SameAbi {
            previous: meta.object_hash,
        }
    }
}

pub(crate) fn new_meta(abi: u32, hash: u64, max_slots: u32) -> Meta {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Meta {
        abi,
        max_slots,
        object_hash: hash,
        created_unix_ns: created,
        ..Meta::default()
    }
}

/// Lists the link pins in `dir/links` as (file name, path).
pub(crate) fn list_links(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let links = link_dir(dir);
    if !links.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&links).map_err(|e| Error::io("listing", &links, e))? {
        let entry = entry.map_err(|e| Error::io("listing", &links, e))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}
