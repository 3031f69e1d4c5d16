//! The placement view of the cluster: nodes with their allocations, pools
//! with per-(OS, runtime) capacity indexes, so that a placement examines a
//! handful of nodes instead of scanning all of them.

use super::cost_index::CostTree;
use super::record::RejectReason;
use super::resources::{Demand, ResVec};
use crate::model::node::ExecutionNode;
use crate::model::pool::{DEFAULT_POOL, ResourcePool};
use crate::model::ratio::Ratio;
use crate::model::runtime::{OsType, RuntimeRequirement, RuntimeType};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Dense index of a node (stable: nodes are never removed, only cordoned).
pub type NodeIdx = u32;

/// One instance placed on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// Application id.
    pub app: u32,
    /// Tenant id.
    pub tenant: u32,
    /// Workload name.
    pub workload: String,
    /// Replica number.
    pub replica: u32,
    /// Application priority when placed.
    pub priority: u32,
    /// Whether the workload is critical.
    pub critical: bool,
    /// What it holds.
    pub demand: Demand,
}

/// What is allocated on a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Sum of requests.
    pub alloc: ResVec,
    /// Sum of reservations.
    pub reserved: ResVec,
    /// Sum of network reservations (egress, ingress).
    pub net_reserved: (u64, u64),
}

impl Usage {
    /// Usage without `d`.
    #[must_use]
    pub fn without(self, d: &Demand) -> Usage {
        Usage {
            alloc: self.alloc.minus(d.request),
            reserved: self.reserved.minus(d.reserve),
            net_reserved: (
                self.net_reserved.0.saturating_sub(d.net_reserve.0),
                self.net_reserved.1.saturating_sub(d.net_reserve.1),
            ),
        }
    }
}

/// A node with what is allocated on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeState {
    /// The node as registered.
    pub spec: ExecutionNode,
    /// Capacity.
    pub cap: ResVec,
    /// Sum of requests placed.
    pub alloc: ResVec,
    /// Sum of reservations placed.
    pub reserved: ResVec,
    /// Sum of network reservations (egress, ingress).
    pub net_reserved: (u64, u64),
    /// Instances placed, by serial.
    pub instances: BTreeMap<u64, Placed>,
    /// BestEffort and Burstable instances (interference for SLA-aware).
    pub noisy: u32,
    /// cpu requested per tenant id.
    pub tenant_cpu: Vec<(u32, u64)>,
    /// Interned failure domains (key id, value id).
    pub domains: Vec<(u32, u32)>,
    /// Cost per hour in thousandths (`u64::MAX` when unknown).
    pub cost: u64,
    /// Since when the node is Down (silent), if it is.
    pub down: Option<crate::model::time::Timestamp>,
    /// Its agent has registered it (a node only declared by a document
    /// takes no work: nothing would run there).
    #[serde(default = "registered_default")]
    pub registered: bool,
    /// Deleted: kept only so that past decisions still name it.
    #[serde(default)]
    pub removed: bool,
    runtime_mask: u8,
    slots: Vec<u32>,
}

/// Nodes in states written before registration was tracked were registered.
fn registered_default() -> bool {
    true
}

impl NodeState {
    /// True when new instances may be placed here: registered by its agent,
    /// not cordoned, not Down, not deleted.
    pub fn takes_work(&self) -> bool {
        self.spec.schedulable && self.down.is_none() && self.registered && !self.removed
    }

    /// Free cpu at ratio 1 (zero when overcommitted).
    pub fn free_cpu(&self) -> u64 {
        self.cap.cpu.saturating_sub(self.alloc.cpu)
    }

    /// Free cpu at ratio 1, negative when overcommitted: the index key.
    pub fn free_key(&self) -> i64 {
        self.cap.cpu as i64 - self.alloc.cpu as i64
    }

    /// True when the node runs `req` (OS and runtime type).
    pub fn supports(&self, req: &RuntimeRequirement) -> bool {
        self.spec.os == req.os && self.runtime_mask & (1 << req.runtime_type.index()) != 0
    }

    /// Value id of failure-domain key `key`.
    pub fn domain(&self, key: u32) -> Option<u32> {
        self.domains
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// cpu requested by tenant `t`.
    pub fn tenant_cpu(&self, t: u32) -> u64 {
        self.tenant_cpu
            .iter()
            .find(|(x, _)| *x == t)
            .map_or(0, |(_, c)| *c)
    }

    /// What is allocated on the node.
    pub fn usage(&self) -> Usage {
        Usage {
            alloc: self.alloc,
            reserved: self.reserved,
            net_reserved: self.net_reserved,
        }
    }

    /// Whether `d` fits at overcommit `ratio`; the first failing reason.
    pub fn fit(&self, d: &Demand, ratio: Ratio) -> Result<(), RejectReason> {
        self.fit_with(self.usage(), d, ratio)
    }

    /// Whether `d` fits if the node's usage were `u`.
    pub fn fit_with(&self, u: Usage, d: &Demand, ratio: Ratio) -> Result<(), RejectReason> {
        if !self.registered {
            return Err(RejectReason::NotRegistered);
        }
        if !self.takes_work() {
            return Err(RejectReason::Unschedulable);
        }
        if !self.supports(&d.runtime) {
            return Err(RejectReason::IncompatibleRuntime);
        }
        if u.alloc.cpu.saturating_add(d.request.cpu) > ratio.apply(self.cap.cpu) {
            return Err(RejectReason::InsufficientCpu);
        }
        if u.alloc.memory.saturating_add(d.request.memory) > self.cap.memory {
            return Err(RejectReason::InsufficientMemory);
        }
        if u.alloc.gpu.saturating_add(d.request.gpu) > self.cap.gpu {
            return Err(RejectReason::InsufficientGpu);
        }
        if !u.reserved.plus(d.reserve).fits_in(self.cap) {
            return Err(RejectReason::ReservationCapacity);
        }
        let link = |cap: Option<u64>, used: u64, ask: u64| {
            ask == 0 || cap.is_none_or(|c| used.saturating_add(ask) <= c)
        };
        let egress = self.spec.capacity.network_egress.map(|b| b.get());
        let ingress = self.spec.capacity.network_ingress.map(|b| b.get());
        if !link(egress, u.net_reserved.0, d.net_reserve.0)
            || !link(ingress, u.net_reserved.1, d.net_reserve.1)
        {
            return Err(RejectReason::NetworkReservation);
        }
        Ok(())
    }

    fn add(&mut self, p: &Placed) {
        self.alloc = self.alloc.plus(p.demand.request);
        self.reserved = self.reserved.plus(p.demand.reserve);
        self.net_reserved.0 += p.demand.net_reserve.0;
        self.net_reserved.1 += p.demand.net_reserve.1;
        if p.demand.is_noisy() {
            self.noisy += 1;
        }
        match self.tenant_cpu.iter_mut().find(|(t, _)| *t == p.tenant) {
            Some((_, c)) => *c += p.demand.request.cpu,
            None => self.tenant_cpu.push((p.tenant, p.demand.request.cpu)),
        }
    }

    fn sub(&mut self, p: &Placed) {
        self.alloc = self.alloc.minus(p.demand.request);
        self.reserved = self.reserved.minus(p.demand.reserve);
        self.net_reserved.0 = self.net_reserved.0.saturating_sub(p.demand.net_reserve.0);
        self.net_reserved.1 = self.net_reserved.1.saturating_sub(p.demand.net_reserve.1);
        if p.demand.is_noisy() {
            self.noisy = self.noisy.saturating_sub(1);
        }
        if let Some((_, c)) = self.tenant_cpu.iter_mut().find(|(t, _)| *t == p.tenant) {
            *c = c.saturating_sub(p.demand.request.cpu);
        }
        self.tenant_cpu.retain(|(_, c)| *c > 0);
    }
}

/// Nodes of one pool that can run one (OS, runtime type), indexed by free
/// cpu and by cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClassIndex {
    /// (free cpu at ratio 1, negative when overcommitted, node), ascending.
    pub by_free: BTreeSet<(i64, NodeIdx)>,
    /// (cost, node), ascending.
    pub by_cost: Vec<(u64, NodeIdx)>,
    /// The same nodes with a max-tree over free cpu.
    pub cost_tree: CostTree,
    /// Largest cpu capacity in the class (bounds overcommit headroom).
    pub max_cap_cpu: u64,
}

/// A pool and its indexes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolState {
    /// The pool as defined.
    pub spec: ResourcePool,
    /// Member nodes (schedulable or not).
    pub members: BTreeSet<NodeIdx>,
    /// Capacity of schedulable members.
    pub cap: ResVec,
    slots: [[u32; 3]; 2],
}

impl PoolState {
    /// Slot of the index for `req`.
    fn slot(&self, req: &RuntimeRequirement) -> u32 {
        self.slots[req.os.index()][req.runtime_type.index()]
    }
}

fn intern(map: &mut BTreeMap<String, u32>, s: &str) -> u32 {
    if let Some(&id) = map.get(s) {
        return id;
    }
    let id = map.len() as u32;
    map.insert(s.to_string(), id);
    id
}

/// The cluster as placement sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cluster {
    nodes: Vec<NodeState>,
    by_name: BTreeMap<String, NodeIdx>,
    pools: BTreeMap<String, PoolState>,
    slots: Vec<ClassIndex>,
    domain_keys: BTreeMap<String, u32>,
    domain_values: BTreeMap<String, u32>,
    total_cap: ResVec,
    next_serial: u64,
}

impl Default for Cluster {
    fn default() -> Self {
        let mut c = Self {
            nodes: Vec::new(),
            by_name: BTreeMap::new(),
            pools: BTreeMap::new(),
            slots: Vec::new(),
            domain_keys: BTreeMap::new(),
            domain_values: BTreeMap::new(),
            total_cap: ResVec::default(),
            next_serial: 1,
        };
        c.set_pool(ResourcePool::default_pool());
        c
    }
}

impl Cluster {
    /// An empty cluster with the implicit `default` pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every node by index, deleted ones included (past decisions name
    /// nodes by index).
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// The nodes not deleted.
    pub fn live_nodes(&self) -> impl Iterator<Item = &NodeState> {
        self.nodes.iter().filter(|n| !n.removed)
    }

    /// Node `i`.
    pub fn node(&self, i: NodeIdx) -> Option<&NodeState> {
        self.nodes.get(i as usize)
    }

    /// Name of node `i` (empty when unknown).
    pub fn name(&self, i: NodeIdx) -> &str {
        self.node(i).map_or("", |n| n.spec.name.as_str())
    }

    /// Index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<NodeIdx> {
        self.by_name.get(name).copied()
    }

    /// Pools by name.
    pub fn pools(&self) -> &BTreeMap<String, PoolState> {
        &self.pools
    }

    /// Pool `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolState> {
        self.pools.get(name)
    }

    /// Capacity of every schedulable node.
    pub fn total_capacity(&self) -> ResVec {
        self.total_cap
    }

    /// Id of failure-domain key `key`, if any node has it.
    pub fn domain_key(&self, key: &str) -> Option<u32> {
        self.domain_keys.get(key).copied()
    }

    /// Name of a failure-domain value id.
    pub fn domain_value_name(&self, id: u32) -> &str {
        self.domain_values
            .iter()
            .find(|(_, v)| **v == id)
            .map_or("", |(k, _)| k.as_str())
    }

    /// The index for `req` in pool `pool`.
    pub fn class(&self, pool: &PoolState, req: &RuntimeRequirement) -> &ClassIndex {
        &self.slots[pool.slot(req) as usize]
    }

    /// Adds or updates a node; allocations on it are kept.
    pub fn upsert_node(&mut self, spec: ExecutionNode) -> NodeIdx {
        let registered = self
            .index_of(&spec.name)
            .and_then(|i| self.node(i))
            .is_none_or(|n| n.registered);
        self.upsert_node_as(spec, registered)
    }

    /// Adds or replaces a node, saying whether its agent registered it.
    pub fn upsert_node_as(&mut self, spec: ExecutionNode, registered: bool) -> NodeIdx {
        let idx = match self.by_name.get(&spec.name) {
            Some(&i) => {
                self.unindex(i);
                i
            }
            None => {
                let i = self.nodes.len() as NodeIdx;
                self.by_name.insert(spec.name.clone(), i);
                self.nodes.push(NodeState {
                    spec: spec.clone(),
                    cap: ResVec::default(),
                    alloc: ResVec::default(),
                    reserved: ResVec::default(),
                    net_reserved: (0, 0),
                    instances: BTreeMap::new(),
                    noisy: 0,
                    tenant_cpu: Vec::new(),
                    domains: Vec::new(),
                    cost: u64::MAX,
                    down: None,
                    registered,
                    removed: false,
                    runtime_mask: 0,
                    slots: Vec::new(),
                });
                i
            }
        };
        let domains: Vec<(u32, u32)> = spec
            .failure_domains
            .iter()
            .map(|(k, v)| {
                (
                    intern(&mut self.domain_keys, k),
                    intern(&mut self.domain_values, &format!("{k}={v}")),
                )
            })
            .collect();
        let n = &mut self.nodes[idx as usize];
        n.cap = ResVec {
            cpu: spec.capacity.cpu.get(),
            memory: spec.capacity.memory.get(),
            gpu: u64::from(spec.capacity.gpu.get()),
        };
        n.cost = spec.cost_per_hour.map_or(u64::MAX, |c| c.millis());
        n.runtime_mask = spec.runtimes.iter().fold(0, |m, r| m | (1 << r.index()));
        n.domains = domains;
        n.spec = spec;
        n.registered = registered;
        self.index(idx);
        self.recompute_totals();
        idx
    }

    /// Deletes the node named `name`: it leaves every index and its name is
    /// free again; its state stays behind, unlisted, so that past decisions
    /// still name it. The caller makes sure nothing is placed there.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.by_name.remove(name) else {
            return false;
        };
        self.unindex(i);
        self.nodes[i as usize].removed = true;
        self.recompute_totals();
        true
    }

    /// Marks a node Down (silent since `since`) or back (`None`).
    pub fn set_down(&mut self, i: NodeIdx, since: Option<crate::model::time::Timestamp>) {
        if (i as usize) < self.nodes.len() {
            self.unindex(i);
            self.nodes[i as usize].down = since;
            self.index(i);
            self.recompute_totals();
        }
    }

    /// Cordons or uncordons a node.
    pub fn set_schedulable(&mut self, i: NodeIdx, schedulable: bool) {
        if let Some(n) = self.nodes.get(i as usize) {
            let mut spec = n.spec.clone();
            spec.schedulable = schedulable;
            self.upsert_node(spec);
        }
    }

    /// Adds or replaces a pool and rebuilds its indexes.
    pub fn set_pool(&mut self, pool: ResourcePool) {
        let name = pool.name.clone();
        let slots = match self.pools.get(&name) {
            Some(p) => p.slots,
            None => {
                let mut s = [[0u32; 3]; 2];
                for row in &mut s {
                    for slot in row.iter_mut() {
                        *slot = self.slots.len() as u32;
                        self.slots.push(ClassIndex::default());
                    }
                }
                s
            }
        };
        for row in slots {
            for s in row {
                self.slots[s as usize] = ClassIndex::default();
            }
        }
        for n in &mut self.nodes {
            n.slots.retain(|s| !slots.iter().flatten().any(|x| x == s));
        }
        self.pools.insert(
            name.clone(),
            PoolState {
                spec: pool,
                members: BTreeSet::new(),
                cap: ResVec::default(),
                slots,
            },
        );
        for i in 0..self.nodes.len() as NodeIdx {
            self.index_in(i, &name);
        }
    }

    /// Removes a pool (the `default` pool goes back to every node).
    pub fn remove_pool(&mut self, name: &str) {
        if name == DEFAULT_POOL {
            self.set_pool(ResourcePool::default_pool());
            return;
        }
        if let Some(p) = self.pools.remove(name) {
            for row in p.slots {
                for s in row {
                    self.slots[s as usize] = ClassIndex::default();
                    for n in &mut self.nodes {
                        n.slots.retain(|x| *x != s);
                    }
                }
            }
        }
    }

    fn recompute_totals(&mut self) {
        self.total_cap = self
            .nodes
            .iter()
            .filter(|n| n.takes_work())
            .fold(ResVec::default(), |a, n| a.plus(n.cap));
    }

    fn unindex(&mut self, i: NodeIdx) {
        let n = &mut self.nodes[i as usize];
        let key = (n.free_key(), i);
        for s in std::mem::take(&mut n.slots) {
            let c = &mut self.slots[s as usize];
            c.by_free.remove(&key);
            c.by_cost.retain(|(_, x)| *x != i);
            c.cost_tree.invalidate();
        }
        let cap = n.cap;
        let schedulable = n.takes_work();
        for p in self.pools.values_mut() {
            if p.members.remove(&i) && schedulable {
                p.cap = p.cap.minus(cap);
            }
        }
    }

    fn index(&mut self, i: NodeIdx) {
        let names: Vec<String> = self.pools.keys().cloned().collect();
        for name in names {
            self.index_in(i, &name);
        }
    }

    fn index_in(&mut self, i: NodeIdx, pool: &str) {
        let Some(p) = self.pools.get_mut(pool) else {
            return;
        };
        let n = &mut self.nodes[i as usize];
        if n.removed || !p.spec.contains(&n.spec) {
            return;
        }
        p.members.insert(i);
        if !n.takes_work() {
            return;
        }
        p.cap = p.cap.plus(n.cap);
        let os = n.spec.os;
        for rt in RuntimeType::ALL {
            if !n.spec.runtimes.contains(&rt) {
                continue;
            }
            let s = p.slots[os_index(os)][rt.index()];
            let c = &mut self.slots[s as usize];
            c.by_free.insert((n.free_key(), i));
            let pos = c.by_cost.partition_point(|e| *e < (n.cost, i));
            c.by_cost.insert(pos, (n.cost, i));
            c.cost_tree.invalidate();
            c.max_cap_cpu = c.max_cap_cpu.max(n.cap.cpu);
            n.slots.push(s);
        }
    }

    /// Places `p` on node `i` (no checks: call [`NodeState::fit`] first);
    /// returns the instance serial.
    pub fn allocate(&mut self, i: NodeIdx, p: Placed) -> u64 {
        let serial = self.next_serial;
        self.next_serial += 1;
        self.insert(i, serial, p);
        serial
    }

    /// Puts back an instance under a known serial (undo of a release).
    pub fn insert(&mut self, i: NodeIdx, serial: u64, p: Placed) {
        let Some(n) = self.nodes.get_mut(i as usize) else {
            return;
        };
        let old = n.free_key();
        n.add(&p);
        n.instances.insert(serial, p);
        self.reindex(i, old);
    }

    /// The requests of allocation `serial` on node `i` (zero when absent).
    pub fn request_of(&self, i: NodeIdx, serial: u64) -> ResVec {
        self.node(i)
            .and_then(|n| n.instances.get(&serial))
            .map(|x| x.demand.request)
            .unwrap_or_default()
    }

    /// Removes an instance; returns what it held.
    pub fn release(&mut self, i: NodeIdx, serial: u64) -> Option<Placed> {
        let n = self.nodes.get_mut(i as usize)?;
        let p = n.instances.remove(&serial)?;
        let old = n.free_key();
        n.sub(&p);
        self.reindex(i, old);
        Some(p)
    }

    fn reindex(&mut self, i: NodeIdx, old_free: i64) {
        let n = &self.nodes[i as usize];
        let new_free = n.free_key();
        if new_free == old_free {
            return;
        }
        for &s in &n.slots {
            let c = &mut self.slots[s as usize];
            c.by_free.remove(&(old_free, i));
            c.by_free.insert((new_free, i));
            c.cost_tree.update(i, new_free);
        }
    }

    /// Rebuilds the cost trees whose membership changed; call before a
    /// batch of placements.
    pub fn prepare(&mut self) {
        let nodes = &self.nodes;
        for c in &mut self.slots {
            if c.cost_tree.is_dirty() {
                let order: Vec<NodeIdx> = c.by_cost.iter().map(|(_, i)| *i).collect();
                c.cost_tree
                    .rebuild(order.into_iter(), |i| nodes[i as usize].free_key());
            }
        }
    }
}

fn os_index(os: OsType) -> usize {
    os.index()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node::NodeCapacity;
    use crate::model::qos::QosClass;
    use crate::model::resources::{Bytes, MilliCpu};

    pub(crate) fn node(name: &str, cpu: u64, labels: &[(&str, &str)]) -> ExecutionNode {
        ExecutionNode {
            name: name.into(),
            capacity: NodeCapacity {
                cpu: MilliCpu::from_cores(cpu),
                memory: Bytes::from_gib(cpu * 4),
                ..Default::default()
            },
            os: OsType::Linux,
            runtimes: [RuntimeType::Process, RuntimeType::Container].into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            failure_domains: Default::default(),
            cost_per_hour: None,
            schedulable: true,
        }
    }

    fn placed(cpu: u64) -> Placed {
        Placed {
            app: 1,
            tenant: 1,
            workload: "w".into(),
            replica: 0,
            priority: 0,
            critical: true,
            demand: Demand {
                request: ResVec {
                    cpu,
                    memory: 1 << 20,
                    gpu: 0,
                },
                reserve: ResVec::default(),
                net_reserve: (0, 0),
                runtime: RuntimeRequirement {
                    runtime_type: RuntimeType::Process,
                    os: OsType::Linux,
                },
                qos: QosClass::Burstable,
            },
        }
    }

    #[test]
    fn indexes_follow_allocations_and_pools() {
        let mut c = Cluster::new();
        let a = c.upsert_node(node("a", 4, &[("tier", "gpu")]));
        let b = c.upsert_node(node("b", 8, &[]));
        let req = RuntimeRequirement {
            runtime_type: RuntimeType::Process,
            os: OsType::Linux,
        };
        let default = c.pool(DEFAULT_POOL).unwrap();
        assert_eq!(default.members.len(), 2);
        assert_eq!(default.cap.cpu, 12_000);
        let keys: Vec<_> = c.class(default, &req).by_free.iter().copied().collect();
        assert_eq!(keys, [(4000i64, a), (8000, b)]);
        let s = c.allocate(b, placed(6000));
        let default = c.pool(DEFAULT_POOL).unwrap();
        let keys: Vec<_> = c.class(default, &req).by_free.iter().copied().collect();
        assert_eq!(keys, [(2000i64, b), (4000, a)]);
        c.set_pool(ResourcePool {
            name: "gpu".into(),
            selector: serde_json::from_str(r#"{"matchLabels":{"tier":"gpu"}}"#).unwrap(),
        });
        let gpu = c.pool("gpu").unwrap();
        assert_eq!(gpu.members.iter().copied().collect::<Vec<_>>(), [a]);
        assert_eq!(c.release(b, s).unwrap().demand.request.cpu, 6000);
        assert_eq!(c.node(b).unwrap().alloc, ResVec::default());
        c.set_schedulable(a, false);
        let default = c.pool(DEFAULT_POOL).unwrap();
        assert_eq!(c.class(default, &req).by_free.len(), 1);
        assert_eq!(c.total_capacity().cpu, 8000);
        assert_eq!(
            c.node(a).unwrap().fit(&placed(1).demand, Ratio::ONE),
            Err(RejectReason::Unschedulable)
        );
    }

    #[test]
    fn overcommit_applies_to_cpu_only() {
        let mut c = Cluster::new();
        let a = c.upsert_node(node("a", 4, &[]));
        c.allocate(a, placed(4000));
        let n = c.node(a).unwrap();
        assert_eq!(
            n.fit(&placed(1000).demand, Ratio::ONE),
            Err(RejectReason::InsufficientCpu)
        );
        assert_eq!(n.fit(&placed(1000).demand, Ratio(1500)), Ok(()));
        let mut big = placed(0);
        big.demand.request.memory = 16 << 30;
        assert_eq!(
            n.fit(&big.demand, Ratio(3000)),
            Err(RejectReason::InsufficientMemory)
        );
    }
}
