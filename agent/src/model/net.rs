//! What the eBPF datapath reports: per-workload network traffic, caps and
//! throttling, run-queue latency and on-CPU time, and the datapath's own state
//! (`/v1/net`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Network traffic of a workload as its sockets' cgroup sees it (cgroup_skb,
/// L3 bytes: IP header + transport header + payload). Sub-cgroups count as the
/// workload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetworkSample {
    /// Sent by the workload.
    pub egress: NetDirectionSample,
    /// Received by the workload.
    pub ingress: NetDirectionSample,
    /// Sub-cgroups counted with it.
    pub members: usize,
}

/// One direction of a workload's traffic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetDirectionSample {
    /// Bytes passed (L3).
    pub bytes_total: u64,
    /// Packets passed (a GSO/TSO skb counts once).
    pub packets_total: u64,
    /// Bytes dropped by the cap.
    pub dropped_bytes_total: u64,
    /// Packets dropped by the cap.
    pub dropped_packets_total: u64,
    /// Packets passed with congestion notification (egress) or ECN CE (ingress).
    pub marked_packets_total: u64,
    /// Throughput over the last interval.
    pub bytes_per_second: Option<f64>,
    /// Packets per second over the last interval.
    pub packets_per_second: Option<f64>,
    /// Cap in force: the tighter of the class limit and the floor loop's cap.
    pub cap_bytes_per_second: Option<u64>,
    /// The class limit (`profile.network.<dir>.limit`).
    pub limit_bytes_per_second: Option<u64>,
    /// The cap the floor loop sets while floors need the bandwidth.
    pub floor_cap_bytes_per_second: Option<u64>,
    /// Over its bucket now (passing with notification or dropping).
    pub throttled: bool,
    /// How long the current throttle episode has lasted.
    pub throttled_seconds: Option<f64>,
    /// Throttle episodes seen by this agent since it started (ring-buffer events).
    pub throttle_episodes_total: u64,
}

/// Run-queue latency and on-CPU time of a workload's tasks (`tp_btf` programs on
/// `sched_switch`/`sched_wakeup`), summed over its cgroup and sub-cgroups.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct RunQueueSample {
    /// Time its tasks ran on a CPU.
    pub oncpu_seconds_total: f64,
    /// CPUs used over the last interval, by the scheduler's account.
    pub oncpu_cores: Option<f64>,
    /// Times a task was switched out.
    pub slices_total: u64,
    /// Time runnable tasks waited for a CPU (from wakeup or preemption to running).
    pub wait_seconds_total: f64,
    /// Number of waits.
    pub waits_total: u64,
    /// Waits per second over the last interval.
    pub waits_per_second: Option<f64>,
    /// Wait time per second over the last interval: the average number of its
    /// tasks waiting for a CPU.
    pub wait_seconds_per_second: Option<f64>,
    /// Median wait over the last interval (upper bound of its log2 bucket).
    pub wait_p50_seconds: Option<f64>,
    /// 99th percentile wait over the last interval (upper bound of its log2 bucket).
    pub wait_p99_seconds: Option<f64>,
    /// Longest single wait since the datapath first saw the cgroup.
    pub wait_max_seconds: f64,
    /// Waits since the datapath first saw the cgroup, by duration: slot i holds
    /// waits in [2^i, 2^(i+1)) microseconds (slot 0 also those below 1 us).
    pub wait_histogram: Vec<u64>,
    /// Cgroups summed (the workload's and its sub-cgroups).
    pub cgroups: usize,
}

/// `GET /v1/net`: the datapath and what it does for each workload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetStatus {
    /// `[net] enabled`.
    pub enabled: bool,
    /// Network accounting and caps (cgroup_skb programs).
    pub network: DatapathPart,
    /// Run-queue statistics (tp_btf programs).
    pub runqueue: DatapathPart,
    /// The floor loop.
    pub floors: FloorStatus,
    /// The pin directory.
    pub pin_dir: String,
    /// The cgroup2 mount programs attach under.
    pub cgroup2_mount: Option<String>,
    /// Workloads the datapath counts (managed ones and those under a class).
    pub workloads: Vec<NetWorkloadStatus>,
    /// Ring-buffer events since start, by kind.
    pub events: NetEventCounts,
    /// The latest events, oldest first.
    pub recent_events: Vec<NetEventView>,
    /// Packets and bytes of sockets in cgroups below an attach point that are no
    /// workload (sub-cgroups not yet registered).
    pub unregistered_bytes_total: u64,
    /// Events the programs could not queue (reader too slow or agent down).
    pub events_lost_total: u64,
    /// Problems outside any one workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One part of the datapath.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct DatapathPart {
    /// Working.
    pub available: bool,
    /// What was found in the pin directory (`fresh`, `reopened`, `upgraded`,
    /// `replaced: <reason>`), or why the part is unavailable.
    pub detail: String,
}

/// The floor loop.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct FloorStatus {
    /// Running.
    pub running: bool,
    /// Why not, or what it does.
    pub detail: String,
    /// Egress capacity of the node, bytes/s (0: egress floors not enforced).
    pub egress_capacity_bytes_per_second: u64,
    /// Ingress capacity of the node, bytes/s.
    pub ingress_capacity_bytes_per_second: u64,
    /// Tick in ms.
    pub period_ms: u64,
    /// Ticks run.
    pub ticks_total: u64,
    /// Cap writes (set or lift).
    pub cap_writes_total: u64,
    /// Ticks that failed.
    pub errors_total: u64,
    /// Latest decision, egress.
    pub egress: FloorDirection,
    /// Latest decision, ingress.
    pub ingress: FloorDirection,
}

/// The floor loop's latest decision for one direction.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct FloorDirection {
    /// Caps in force.
    pub capping: bool,
    /// Held for floors and uncapped classes, bytes/s.
    pub reserved_bytes_per_second: u64,
    /// Also held back because floors fell short on a link carrying what its configured
    /// capacity says it can (it carries less), bytes/s.
    #[serde(default)]
    pub shortfall_reserve_bytes_per_second: u64,
    /// Left for Burstable and BestEffort, bytes/s.
    pub budget_bytes_per_second: u64,
    /// Their measured demand, bytes/s.
    pub demand_bytes_per_second: u64,
}

/// What the datapath does for one workload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetWorkloadStatus {
    /// Workload id.
    pub workload: String,
    /// Its cgroup2 directory.
    pub cgroup2_path: String,
    /// Its cgroup id (inode of the cgroup2 directory), once resolved.
    pub cgroup_id: Option<u64>,
    /// Under the managed root.
    pub managed: bool,
    /// QoS class, if any (a managed workload without one counts as BestEffort
    /// for floors).
    pub class: Option<String>,
    /// Programs attached and the workload registered.
    pub attached: bool,
    /// Sub-cgroups counted with it.
    pub members: usize,
    /// Class limits, bytes/s.
    pub egress_limit_bytes_per_second: Option<u64>,
    /// Class limits, bytes/s.
    pub ingress_limit_bytes_per_second: Option<u64>,
    /// Network floors, bytes/s.
    pub egress_floor_bytes_per_second: Option<u64>,
    /// Network floors, bytes/s.
    pub ingress_floor_bytes_per_second: Option<u64>,
    /// Floor-loop cap in force now, bytes/s.
    pub egress_floor_cap_bytes_per_second: Option<u64>,
    /// Floor-loop cap in force now, bytes/s.
    pub ingress_floor_cap_bytes_per_second: Option<u64>,
    /// Since when (CLOCK_MONOTONIC ns) the floor loop caps its egress.
    pub egress_floor_capped_since_ns: Option<u64>,
    /// Since when (CLOCK_MONOTONIC ns) the floor loop caps its ingress.
    pub ingress_floor_capped_since_ns: Option<u64>,
    /// Why something asked for is not in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Event counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetEventCounts {
    /// Throttle episodes started.
    pub throttle_starts: u64,
    /// Throttle episodes ended.
    pub throttle_stops: u64,
    /// Drop reports (at most one per 100 ms per workload and direction).
    pub drop_reports: u64,
    /// Packets dropped, as the reports counted them.
    pub drops: u64,
}

/// One ring-buffer event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetEventView {
    /// CLOCK_MONOTONIC of the packet that caused it, ns.
    pub monotonic_ns: u64,
    /// When the agent received it, ms since the Unix epoch.
    pub received_unix_ms: u64,
    /// The workload, when the cgroup is one.
    pub workload: Option<String>,
    /// The cgroup id.
    pub cgroup_id: u64,
    /// `egress` or `ingress`.
    pub direction: String,
    /// `throttle_start`, `throttle_stop` or `drops`.
    pub kind: String,
    /// Length of the episode (`throttle_stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Packets dropped since the previous report (`drops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}
