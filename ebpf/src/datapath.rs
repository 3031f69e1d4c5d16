//! The whole datapath behind one call, and its removal.

use crate::{
    abi,
    bpffs::{OwnerLock, PinDir},
    error::{Error, Result},
    net::{NetDatapath, NetOptions},
    sched::{SchedDatapath, SchedOptions},
};

/// Options of [`Datapath::open`].
#[derive(Clone, Debug)]
pub struct DatapathOptions {
    /// Where everything is pinned; [`PinDir::production`] by default.
    pub pins: PinDir,
    /// Workload slots of the network maps.
    pub max_slots: u32,
}

impl Default for DatapathOptions {
    fn default() -> Self {
        Self {
            pins: PinDir::production(),
            max_slots: abi::DEFAULT_MAX_SLOTS,
        }
    }
}

/// Network and scheduler datapaths, opened together.
#[derive(Debug)]
pub struct Datapath {
    /// Network accounting and caps.
    pub net: NetDatapath,
    /// Scheduler statistics.
    pub sched: SchedDatapath,
}

impl Datapath {
    /// Mounts bpffs if needed and opens (reuses or loads) both datapaths.
    pub fn open(opts: &DatapathOptions) -> Result<Self> {
        let net = NetDatapath::open(&NetOptions {
            pins: opts.pins.clone(),
            max_slots: opts.max_slots,
        })?;
        let sched = SchedDatapath::open(&SchedOptions {
            pins: opts.pins.clone(),
        })?;
        Ok(Self { net, sched })
    }
}

/// Removes every pin under `pins` (detaching all programs). Refuses while an owner runs,
/// unless `force`. Returns the number of pins removed.
pub fn cleanup(pins: &PinDir, force: bool) -> Result<usize> {
    if !force {
        for sub in ["net", "sched"] {
            let dir = pins.sub(sub);
            if dir.is_dir() {
                match OwnerLock::acquire(&dir) {
                    Ok(_) | Err(Error::Io { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let removed = pins.remove_all()?;
    tracing::info!(dir = %pins.path().display(), removed, "datapath pins removed");
    Ok(removed)
}
