//! Decision records (seed 000 §11.2.2) and their explanation (§11.4.1):
//! context, candidates, rejected options with reasons, the selection,
//! policies, and expected against actual outcome.

use crate::lifecycle::Phase;
use crate::model::application::Budget;
use crate::model::names::AppKey;
use crate::model::policy::{SpreadRule, StrategyKind};
use crate::model::ratio::Ratio;
use crate::model::time::Timestamp;
use crate::placement::{NodeIdx, PlacementRecord, RejectCounts, ResVec};
use crate::policy::{PolicyCheck, Resolution};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;

/// Identifier of a decision: `d-<n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DecisionId(pub u64);

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d-{}", self.0)
    }
}

impl FromStr for DecisionId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix("d-")
            .unwrap_or(s)
            .parse()
            .map(DecisionId)
            .map_err(|_| format!("invalid decision id {s:?}: expected d-<number>"))
    }
}

impl Serialize for DecisionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DecisionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecisionKind {
    /// Admission of a new application or version.
    Admission,
    /// Arbitration and placement of an application.
    Arbitration,
    /// Arbitration of a new spec version (rolling update).
    Update,
    /// Placement of added replicas.
    Scale,
    /// Re-placement of replicas taken away (restore, node loss).
    Restore,
    /// A rollout completed, failed, or was rolled back.
    Rollout,
    /// Instances moved off a draining node.
    Drain,
    /// A workflow step waits, was approved, failed; the workflow was
    /// suspended or resumed.
    Workflow,
}

/// Input constraints of an arbitration, summarised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    /// Application priority.
    pub priority: u32,
    /// Strategy used.
    pub strategy: StrategyKind,
    /// cpu overcommit ratio.
    pub overcommit: Ratio,
    /// Largest share of the cluster.
    pub max_cluster_share: Option<Ratio>,
    /// Failure-domain spread.
    pub spread: Option<SpreadRule>,
    /// May preempt lower priorities.
    pub preemption: bool,
    /// Total requests to place.
    pub demand: ResVec,
    /// Instances to place.
    pub instances: u32,
    /// Budget.
    pub budget: Budget,
}

/// Fair-share context of an arbitration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FairShareRecord {
    /// Tenant's weighted dominant share of the pool before, ppb.
    pub tenant_share_before_ppb: u64,
    /// Tenant's weight.
    pub weight: u32,
    /// Position in the arbitration round (1-based).
    pub position: u32,
    /// Applications in the round.
    pub round_size: u32,
}

/// Instances taken from a lower-priority application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRecord {
    /// The victim.
    pub victim: AppKey,
    /// Its priority.
    pub victim_priority: u32,
    /// Node where room was made.
    pub node: NodeIdx,
    /// Instances stopped (`workload/replica`).
    pub instances: Vec<String>,
    /// The replica that needed the room.
    pub for_replica: String,
}

/// What the decision expects to happen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedOutcome {
    /// Phase the application should reach.
    pub phase: Phase,
    /// Requests allocated.
    pub allocated: ResVec,
    /// Distinct nodes used.
    pub nodes: u32,
    /// Cost per hour (thousandths) of the node shares taken.
    pub cost_per_hour_milli: u64,
    /// Tenant's weighted dominant share of the pool after, ppb.
    pub tenant_share_after_ppb: u64,
}

/// One arbitration or admission decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Identifier.
    pub id: DecisionId,
    /// When.
    pub time: Timestamp,
    /// What kind.
    pub kind: DecisionKind,
    /// Application.
    pub app: AppKey,
    /// Spec version decided on.
    pub version: u32,
    /// Resource pool.
    pub pool: String,
    /// Constraints in force (absent for admission).
    pub constraints: Option<Constraints>,
    /// Fair-share context.
    pub fair_share: Option<FairShareRecord>,
    /// Per-replica placements.
    pub placements: Vec<PlacementRecord>,
    /// Preemptions performed.
    pub preemptions: Vec<PreemptionRecord>,
    /// Admission and policy checks that failed (every check, passed or
    /// not, is in the policy evaluation record).
    pub checks: Vec<PolicyCheck>,
    /// Policy evaluation record used.
    pub evaluation: Option<u64>,
    /// Policies that influenced it.
    pub policies: Vec<String>,
    /// Accepted or not.
    pub accepted: bool,
    /// Why (the selection, or what failed).
    pub reason: String,
    /// Expected outcome when accepted.
    pub expected: Option<ExpectedOutcome>,
}

/// A candidate node as shown to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCandidate {
    /// Node name.
    pub node: String,
    /// Strategy score (lower is better).
    pub score: i64,
}

/// One placement as shown to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementExplanation {
    /// `workload/replica`.
    pub replica: String,
    /// Node chosen.
    pub selected: Option<String>,
    /// Candidates scored, best first.
    pub considered: Vec<NamedCandidate>,
    /// Nodes rejected, by reason.
    pub rejected: RejectCounts,
    /// Nodes examined.
    pub examined: u32,
    /// Nodes not examined.
    pub not_examined: u32,
    /// Still placed there now.
    pub still_holds: bool,
}

/// The explanation of a decision (`explain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// Identifier.
    pub id: DecisionId,
    /// Kind.
    pub kind: DecisionKind,
    /// When.
    pub time: Timestamp,
    /// Application.
    pub app: AppKey,
    /// Version.
    pub version: u32,
    /// Pool.
    pub pool: String,
    /// Accepted or not.
    pub accepted: bool,
    /// Why.
    pub reason: String,
    /// Constraints.
    pub constraints: Option<Constraints>,
    /// Fair share.
    pub fair_share: Option<FairShareRecord>,
    /// Placements.
    pub placements: Vec<PlacementExplanation>,
    /// Rejections summed over placements.
    pub rejected_total: RejectCounts,
    /// Preemptions (victim nodes named).
    pub preemptions: Vec<(PreemptionRecord, String)>,
    /// Admission and policy checks.
    pub checks: Vec<PolicyCheck>,
    /// Policies.
    pub policies: Vec<String>,
    /// How each policy field was decided.
    pub resolutions: Vec<Resolution>,
    /// Expected outcome.
    pub expected: Option<ExpectedOutcome>,
    /// Phase of the application now (`None` when deleted).
    pub actual_phase: Option<Phase>,
}

fn pct(ppb: u64) -> String {
    format!("{:.2}%", ppb as f64 / 10_000_000.0)
}

impl Explanation {
    /// Human rendering (times in milliseconds since the epoch).
    pub fn render(&self) -> String {
        self.render_with(&|t| t.to_string())
    }

    /// Human rendering with times rendered by `time`.
    pub fn render_with(&self, time: crate::model::time::TimeFormat<'_>) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Decision {} ({:?}) for {} version {} at {}",
            self.id,
            self.kind,
            self.app,
            self.version,
            time(self.time)
        );
        let _ = writeln!(
            s,
            "Result: {} — {}",
            if self.accepted { "accepted" } else { "refused" },
            self.reason
        );
        let _ = writeln!(s, "Pool: {}", self.pool);
        if let Some(c) = &self.constraints {
            let _ = writeln!(
                s,
                "Constraints: priority {}, strategy {}, overcommit {}, preemption {}, {} instance(s) requesting {}",
                c.priority,
                c.strategy,
                c.overcommit,
                if c.preemption { "allowed" } else { "off" },
                c.instances,
                c.demand.describe()
            );
            if let Some(sh) = c.max_cluster_share {
                let _ = writeln!(s, "  max share of the cluster: {sh}");
            }
            if let Some(sp) = &c.spread {
                let _ = writeln!(s, "  replicas spread over at least {} {}", sp.count, sp.key);
            }
        }
        if let Some(f) = &self.fair_share {
            let _ = writeln!(
                s,
                "Fair share: tenant weighted share {} (weight {}), served {} of {} in its round",
                pct(f.tenant_share_before_ppb),
                f.weight,
                f.position,
                f.round_size
            );
        }
        if !self.checks.is_empty() {
            let _ = writeln!(s, "Checks:");
            for c in &self.checks {
                let _ = writeln!(
                    s,
                    "  [{}] {}: {}{}",
                    if c.passed { "ok" } else { "FAIL" },
                    c.rule,
                    c.detail,
                    c.policy
                        .as_ref()
                        .map(|p| format!(" (policy {p})"))
                        .unwrap_or_default()
                );
            }
        }
        if !self.placements.is_empty() {
            let _ = writeln!(s, "Placements:");
            for p in &self.placements {
                let cands: Vec<String> = p
                    .considered
                    .iter()
                    .map(|c| format!("{} ({})", c.node, c.score))
                    .collect();
                let rej: Vec<String> = p
                    .rejected
                    .iter()
                    .map(|(r, n)| format!("{r}: {n}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {} -> {}{}",
                    p.replica,
                    p.selected.as_deref().unwrap_or("none"),
                    if p.selected.is_some() && !p.still_holds {
                        " (no longer there)"
                    } else {
                        ""
                    }
                );
                let _ = writeln!(
                    s,
                    "      considered [{}]; examined {}, not examined {}",
                    cands.join(", "),
                    p.examined,
                    p.not_examined
                );
                if !rej.is_empty() {
                    let _ = writeln!(s, "      rejected: {}", rej.join(", "));
                }
            }
        }
        for (p, node) in &self.preemptions {
            let _ = writeln!(
                s,
                "Preempted {} (priority {}) on {}: {} for {}",
                p.victim,
                p.victim_priority,
                node,
                p.instances.join(", "),
                p.for_replica
            );
        }
        if !self.policies.is_empty() {
            let _ = writeln!(s, "Policies: {}", self.policies.join(", "));
            for r in &self.resolutions {
                let over: Vec<String> = r
                    .overridden
                    .iter()
                    .map(|o| format!("{} asked {}", o.policy, o.asked))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {} = {} by {} ({}){}",
                    r.field,
                    r.value,
                    r.decided_by,
                    r.rule,
                    if over.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", over.join(", "))
                    }
                );
            }
        }
        if let Some(e) = &self.expected {
            let _ = writeln!(
                s,
                "Expected: {} on {} node(s), {} allocated, tenant share after {}{}",
                e.phase,
                e.nodes,
                e.allocated.describe(),
                pct(e.tenant_share_after_ppb),
                if e.cost_per_hour_milli > 0 {
                    format!(", cost {}/h", Ratio(e.cost_per_hour_milli))
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            s,
            "Actual: {}",
            self.actual_phase
                .map_or("application deleted".to_string(), |p| format!("phase {p}"))
        );
        s
    }
}
