//! Starts the control plane inside darosd: this node's description from the
//! sensed capacity, the `[mesh]` settings, and the runtime executor.

use std::collections::BTreeSet;
use std::sync::Arc;

use daros_coordinator::model::node::NodeCapacity;
use daros_coordinator::model::runtime::{OsType, RuntimeType};
use daros_coordinator::{Bytes, ExecutionNode, GpuCount, MilliCpu};
use tracing::error;

use crate::config::Config;
use crate::control::work::WorkExecutor;
use crate::control::{ControlPlane, ControlSettings, NodeSpecFn, bootstrap};
use crate::sensing::Latest;

/// This node as the coordinator sees it, from the latest sample.
pub fn node_spec(
    name: String,
    latest: Arc<Latest>,
    cfg: &Config,
    runtimes: BTreeSet<RuntimeType>,
) -> NodeSpecFn {
    let labels = cfg.mesh.labels.clone();
    let domains = cfg.mesh.failure_domains.clone();
    // Allocatable, as the kubelet reports it: the node's total less what is
    // kept for the system. The node's own QoS admission keeps the same
    // reservation, so work placed within this is never refused there.
    let (reserved_cpu, reserved_memory) = (
        cfg.qos.system_reserved_cpu.0,
        cfg.qos.system_reserved_memory.0,
    );
    Arc::new(move || {
        let snap = latest.get();
        let total_cpu = u64::from(snap.node.cpu.cpus.max(1)) * 1000;
        ExecutionNode {
            name: name.clone(),
            capacity: NodeCapacity {
                cpu: MilliCpu(total_cpu.saturating_sub(reserved_cpu).max(1)),
                memory: Bytes(
                    snap.node
                        .memory
                        .total_bytes
                        .saturating_sub(reserved_memory)
                        .max(1),
                ),
                gpu: GpuCount(u32::try_from(snap.node.gpu.devices.len()).unwrap_or(u32::MAX)),
                network_egress: None,
                network_ingress: None,
            },
            os: OsType::Linux,
            runtimes: runtimes.clone(),
            labels: labels.clone(),
            failure_domains: domains.clone(),
            cost_per_hour: None,
            schedulable: true,
        }
    })
}

/// Starts the control plane; logs and returns `None` when it cannot start (the
/// node side of darosd keeps working, the apps API answers 503).
pub async fn start(
    cfg: &Config,
    node_name: &str,
    latest: Arc<Latest>,
    executor: Option<Arc<dyn WorkExecutor>>,
    runtimes: BTreeSet<RuntimeType>,
) -> Option<Arc<ControlPlane>> {
    let id = match bootstrap::node_id_of(node_name) {
        Ok(id) => id,
        Err(e) => {
            error!(error = %e, "control plane not started");
            return None;
        }
    };
    let settings = ControlSettings {
        data_dir: cfg.agent.data_dir.clone(),
        node_name: id.to_string(),
        mesh: cfg.mesh.clone(),
        node_spec: node_spec(id.to_string(), Arc::clone(&latest), cfg, runtimes),
        psi: Arc::new(move || latest.get().node.psi),
    };
    match ControlPlane::start(settings, executor).await {
        Ok(p) => Some(p),
        Err(e) => {
            error!(error = %e, "control plane not started; the apps API answers 503");
            None
        }
    }
}
