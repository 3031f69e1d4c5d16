//! The datapath's error type: every variant names what it was doing and on which path, map or
//! program, so an operator can act on the message alone.

use std::{io, path::PathBuf};

use crate::{bucket::CapError, cgroup::CgroupId};

/// Errors of the eBPF datapath.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem operation on bpffs, a pin or a cgroup failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("mounting bpffs on", "reading cgroup", ...).
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The path is not on a cgroup v2 filesystem.
    #[error("{0} is not a cgroup v2 directory (cgroup BPF programs attach only to cgroup v2)")]
    NotCgroup2(PathBuf),
    /// No cgroup v2 mount was found.
    #[error("no cgroup v2 mount found at /sys/fs/cgroup or /sys/fs/cgroup/unified")]
    NoCgroup2,
    /// The pin directory is not on bpffs.
    #[error("{0} is not on a bpf filesystem")]
    NotBpfFs(PathBuf),
    /// Another process owns the pinned datapath.
    #[error("{0} is owned by another running process (lock held); stop it first")]
    Busy(PathBuf),
    /// aya failed to parse or load an object.
    #[error("loading eBPF object {object}: {source}")]
    Load {
        /// Object name (`net`, `sched`).
        object: &'static str,
        /// aya's error.
        #[source]
        source: Box<aya::EbpfError>,
    },
    /// A program operation failed.
    #[error("program {name}: {action}: {source}")]
    Program {
        /// Program name.
        name: String,
        /// What was attempted.
        action: &'static str,
        /// aya's error.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// A map operation failed.
    #[error("map {name}: {action}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// What was attempted.
        action: &'static str,
        /// aya's error.
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// Pinning an object failed.
    #[error("pinning {path}: {source}")]
    Pin {
        /// Target pin path.
        path: PathBuf,
        /// aya's error.
        #[source]
        source: Box<aya::pin::PinError>,
    },
    /// Reopening a pinned link failed.
    #[error("opening pinned link {path}: {source}")]
    Link {
        /// The pin.
        path: PathBuf,
        /// aya's error.
        #[source]
        source: Box<aya::programs::links::LinkError>,
    },
    /// A pinned map does not have the shape this build expects.
    #[error("pinned map {path} does not match this build: {reason}")]
    Incompatible {
        /// The pin.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A raw bpf(2) command failed.
    #[error("bpf({cmd}) on {what}: {source}")]
    Syscall {
        /// Command name.
        cmd: &'static str,
        /// Object it was applied to.
        what: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// Kernel BTF could not be read.
    #[error("reading kernel BTF from /sys/kernel/btf/vmlinux: {0}")]
    Btf(#[source] Box<aya::BtfError>),
    /// Every workload slot is in use.
    #[error("all {0} workload slots are in use; remove workloads or reload with more slots")]
    SlotsFull(u32),
    /// No free index position near the cgroup id's home (the index is too crowded).
    #[error(
        "no free workload index position within {probes} probes for cgroup {cgroup}; remove unused workloads or members"
    )]
    IndexFull {
        /// The cgroup id.
        cgroup: u64,
        /// Probes tried.
        probes: u32,
    },
    /// The cgroup is not a registered workload.
    #[error("cgroup {0} is not a registered workload")]
    UnknownWorkload(CgroupId),
    /// The cgroup id is already a key (workload or member) of another workload.
    #[error("cgroup {cgroup} already belongs to workload {owner}")]
    AlreadyMember {
        /// The key.
        cgroup: CgroupId,
        /// Its current workload.
        owner: CgroupId,
    },
    /// The attach point overlaps an existing one: programs would run twice per packet.
    #[error("cannot attach at {path}: {other} is already attached and one contains the other")]
    OverlappingAttach {
        /// Requested attach point.
        path: PathBuf,
        /// The existing attach point (cgroup id).
        other: CgroupId,
    },
    /// A cap is invalid.
    #[error(transparent)]
    Cap(#[from] CapError),
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            what,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn map(name: &'static str, action: &'static str, e: aya::maps::MapError) -> Self {
        Self::Map {
            name,
            action,
            source: Box::new(e),
        }
    }

    pub(crate) fn program(
        name: impl Into<String>,
        action: &'static str,
        e: aya::programs::ProgramError,
    ) -> Self {
        Self::Program {
            name: name.into(),
            action,
            source: Box::new(e),
        }
    }

    pub(crate) fn pin(path: impl Into<PathBuf>, e: aya::pin::PinError) -> Self {
        Self::Pin {
            path: path.into(),
            source: Box::new(e),
        }
    }
}
