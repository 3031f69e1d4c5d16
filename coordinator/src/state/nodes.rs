//! A node as two parties describe it. Its agent registers what it measured
//! (capacity, runtimes, OS, labels and failure domains it knows); an
//! operator's `Node` document may add labels, failure domains and a cost,
//! cordon it, and reserve capacity, never add capacity it does not have. A
//! document naming a node no agent has registered declares it: listed as
//! not yet seen and never given work, until its agent registers (then the
//! declaration applies on top of what it measured).

use std::collections::BTreeSet;

use super::Coordinator;
use crate::error::CoordinatorError;
use crate::field::FieldError;
use crate::model::node::{ExecutionNode, NodeCapacity};

/// Per resource, the smaller of the two (a declaration can only reserve).
fn min_capacity(declared: &NodeCapacity, measured: &NodeCapacity) -> NodeCapacity {
    let min_opt = |d: Option<_>, m: Option<_>| match (d, m) {
        (Some(d), Some(m)) => Some(std::cmp::min(d, m)),
        (d, m) => d.or(m),
    };
    NodeCapacity {
        cpu: declared.cpu.min(measured.cpu),
        memory: declared.memory.min(measured.memory),
        gpu: declared.gpu.min(measured.gpu),
        network_egress: min_opt(declared.network_egress, measured.network_egress),
        network_ingress: min_opt(declared.network_ingress, measured.network_ingress),
    }
}

/// What placement sees: the measured node with the declaration on top.
/// `schedulable` is the operator's cordon, decided by the caller.
fn merged(declared: &ExecutionNode, measured: &ExecutionNode, schedulable: bool) -> ExecutionNode {
    let mut labels = measured.labels.clone();
    labels.extend(declared.labels.clone());
    let mut failure_domains = measured.failure_domains.clone();
    failure_domains.extend(declared.failure_domains.clone());
    let runtimes: BTreeSet<_> = measured
        .runtimes
        .intersection(&declared.runtimes)
        .copied()
        .collect();
    ExecutionNode {
        name: measured.name.clone(),
        capacity: min_capacity(&declared.capacity, &measured.capacity),
        os: measured.os,
        runtimes,
        labels,
        failure_domains,
        cost_per_hour: declared.cost_per_hour.or(measured.cost_per_hour),
        schedulable,
    }
}

impl Coordinator {
    /// Why a `Node` document cannot apply: it would give a registered node
    /// more than its agent measured, or runtimes it does not have.
    pub(super) fn node_doc_errors(&self, doc: &ExecutionNode) -> Vec<FieldError> {
        let Some(m) = self.measured.get(&doc.name) else {
            return Vec::new();
        };
        let mut errs = Vec::new();
        let mut over = |field: &str, asked: String, has: String| {
            errs.push(FieldError::new(
                format!("spec.capacity.{field}"),
                format!(
                    "{asked} is more than node {} reports ({has}); a Node document can reserve capacity, not add it",
                    doc.name
                ),
            ));
        };
        let (d, c) = (&doc.capacity, &m.capacity);
        if d.cpu > c.cpu {
            over("cpu", d.cpu.to_string(), c.cpu.to_string());
        }
        if d.memory > c.memory {
            over("memory", d.memory.to_string(), c.memory.to_string());
        }
        if d.gpu > c.gpu {
            over("gpu", d.gpu.0.to_string(), c.gpu.0.to_string());
        }
        for (field, asked, has) in [
            ("networkEgress", d.network_egress, c.network_egress),
            ("networkIngress", d.network_ingress, c.network_ingress),
        ] {
            if let (Some(a), Some(h)) = (asked, has)
                && a > h
            {
                over(field, a.to_string(), h.to_string());
            }
        }
        let missing: Vec<String> = doc
            .runtimes
            .difference(&m.runtimes)
            .map(|r| format!("{r:?}").to_lowercase())
            .collect();
        if !missing.is_empty() {
            errs.push(FieldError::new(
                "spec.runtimes",
                format!(
                    "node {} does not run {} (its agent reports {:?})",
                    doc.name,
                    missing.join(", "),
                    m.runtimes
                        .iter()
                        .map(|r| format!("{r:?}").to_lowercase())
                        .collect::<Vec<_>>()
                ),
            ));
        }
        errs
    }

    /// An operator's `Node` document (checked by [`Self::node_doc_errors`]).
    pub(super) fn declare_node(&mut self, doc: ExecutionNode) {
        let name = doc.name.clone();
        let schedulable = doc.schedulable;
        self.declared.insert(name.clone(), doc);
        self.refresh_node(&name, schedulable);
    }

    /// A node's own registration: what it measured. Its cordon and what an
    /// operator declared stay as they are (a restarted agent neither
    /// uncordons its node nor blinds the cost-aware strategy).
    pub(super) fn register_node(&mut self, node: ExecutionNode) {
        let name = node.name.clone();
        let current = self
            .cluster
            .index_of(&name)
            .and_then(|i| self.cluster.node(i))
            .map(|n| (n.spec.schedulable, n.spec.cost_per_hour));
        let mut node = node;
        if let Some((_, cost)) = current
            && node.cost_per_hour.is_none()
        {
            node.cost_per_hour = cost;
        }
        let schedulable = current.is_none_or(|(s, _)| s);
        self.measured.insert(name.clone(), node);
        self.refresh_node(&name, schedulable);
    }

    /// Recomputes what placement sees of node `name`.
    fn refresh_node(&mut self, name: &str, schedulable: bool) {
        let spec = match (self.declared.get(name), self.measured.get(name)) {
            (Some(d), Some(m)) => merged(d, m, schedulable),
            (Some(d), None) => ExecutionNode {
                schedulable,
                ..d.clone()
            },
            (None, Some(m)) => ExecutionNode {
                schedulable,
                ..m.clone()
            },
            (None, None) => return,
        };
        let registered = self.measured.contains_key(name);
        self.cluster.upsert_node_as(spec, registered);
        self.capacity_epoch += 1;
    }

    /// What node `name`'s agent reported, if it registered.
    pub fn measured_node(&self, name: &str) -> Option<&ExecutionNode> {
        self.measured.get(name)
    }

    /// Deletes a node that is gone (see [`crate::Command::DeleteNode`]).
    pub(super) fn cmd_delete_node(&mut self, name: &str) -> Result<(), CoordinatorError> {
        let idx = self
            .cluster
            .index_of(name)
            .ok_or_else(|| CoordinatorError::UnknownNode(name.to_string()))?;
        let Some(n) = self.cluster.node(idx) else {
            return Err(CoordinatorError::UnknownNode(name.to_string()));
        };
        if n.registered && n.down.is_none() {
            return Err(CoordinatorError::NodeAlive(name.to_string()));
        }
        let placed: Vec<String> = self
            .instances_on(name)
            .map(|(e, k, _)| format!("{}/{}/{}", e.key, k.workload, k.replica))
            .collect();
        if let Some(first) = placed.first() {
            return Err(CoordinatorError::NodeInUse {
                node: name.to_string(),
                instances: placed.len(),
                first: first.clone(),
            });
        }
        self.cluster.remove_node(name);
        self.declared.remove(name);
        self.measured.remove(name);
        self.drains.remove(name);
        self.pressure.remove(name);
        self.capacity_epoch += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::{Bytes, MilliCpu};
    use crate::model::runtime::{OsType, RuntimeType};

    fn node(cpu: u64, gib: u64) -> ExecutionNode {
        ExecutionNode {
            name: "n1".into(),
            capacity: NodeCapacity {
                cpu: MilliCpu::from_cores(cpu),
                memory: Bytes::from_gib(gib),
                ..Default::default()
            },
            os: OsType::Linux,
            runtimes: [RuntimeType::Process].into(),
            labels: Default::default(),
            failure_domains: Default::default(),
            cost_per_hour: None,
            schedulable: true,
        }
    }

    #[test]
    fn a_declaration_reserves_and_labels_but_never_adds() {
        let mut m = node(8, 32);
        m.labels.insert("zone".into(), "a".into());
        let mut d = node(6, 64);
        d.labels.insert("team".into(), "web".into());
        let e = merged(&d, &m, true);
        assert_eq!(e.capacity.cpu, MilliCpu::from_cores(6));
        assert_eq!(e.capacity.memory, Bytes::from_gib(32));
        assert_eq!(e.labels.len(), 2);
    }
}
