//! Health of the runtime adapters (issue 16): every operation the agent asks
//! of an adapter, counted by outcome (`ok` or the error's code), and whether
//! each adapter answered its last probe (a `list` of what it runs: the
//! process adapter's own records, the Kubernetes API's pods of this node).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::AdapterError;
use crate::instance::AdapterKind;

/// Operations of [`crate::RuntimeAdapter`] counted.
pub const OPERATIONS: [&str; 6] = ["create", "start", "stop", "destroy", "inspect", "list"];

/// The adapters' counters and last probe results.
#[derive(Debug, Default)]
pub struct AdapterStats {
    ops: Mutex<BTreeMap<(AdapterKind, &'static str, &'static str), u64>>,
    probes: Mutex<BTreeMap<AdapterKind, Result<(), String>>>,
}

/// One adapter's health as a probe left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterHealth {
    /// The adapter.
    pub adapter: AdapterKind,
    /// `Ok` when its last probe answered; else why not.
    pub last_probe: Result<(), String>,
}

impl AdapterStats {
    /// Counts `op` on `adapter` ending with `r`.
    pub fn count<T>(&self, adapter: AdapterKind, op: &'static str, r: &Result<T, AdapterError>) {
        let outcome = match r {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        if let Ok(mut m) = self.ops.lock() {
            *m.entry((adapter, op, outcome)).or_default() += 1;
        }
    }

    /// Records a probe of `adapter`.
    pub fn probed<T>(&self, adapter: AdapterKind, r: &Result<T, AdapterError>) {
        if let Ok(mut m) = self.probes.lock() {
            m.insert(adapter, r.as_ref().map(|_| ()).map_err(ToString::to_string));
        }
    }

    /// Operations by (adapter, operation, outcome).
    pub fn operations(&self) -> Vec<((AdapterKind, &'static str, &'static str), u64)> {
        self.ops
            .lock()
            .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default()
    }

    /// The last probe of each adapter probed.
    pub fn health(&self) -> Vec<AdapterHealth> {
        self.probes
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(a, r)| AdapterHealth {
                        adapter: *a,
                        last_probe: r.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}
