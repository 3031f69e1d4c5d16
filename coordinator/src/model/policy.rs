//! Policy (seed 000 §8): rules at Global, Tenant and Application scope.
//! How they merge is in [`crate::policy`].

use super::ratio::Ratio;
use super::runtime::RuntimeType;
use crate::field::{FieldError, join};

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// Placement strategy (seed 000 §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Fill nodes: best fit, utilisation first.
    BinPack,
    /// Spread over nodes and failure domains: availability first.
    Spread,
    /// Latency-sensitive work on the quietest nodes.
    SlaAware,
    /// Cheapest node that fits.
    CostAware,
    /// Keep each tenant's footprint per node even.
    FairShare,
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrategyKind::BinPack => "bin-pack",
            StrategyKind::Spread => "spread",
            StrategyKind::SlaAware => "sla-aware",
            StrategyKind::CostAware => "cost-aware",
            StrategyKind::FairShare => "fair-share",
        })
    }
}

/// Replicas of a workload must use at least `count` distinct values of the
/// failure-domain key `key` (or all of them when there are fewer replicas).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpreadRule {
    /// Failure-domain key, e.g. `rack` or `zone`.
    pub key: String,
    /// Distinct domains required.
    pub count: u32,
}

/// What happens to an application that lost capacity it cannot get back
/// (its replicas preempted, or lost with a node and not re-placed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CapacityLossAction {
    /// Keep running with what is left (Degraded); restored when capacity
    /// returns.
    #[default]
    Degrade,
    /// Evict it at once: Terminated, everything released (`Evicted`).
    Evict,
}

/// The platform's degradation policy (seed 000 §8.2.1
/// `GlobalDegradationPolicy`); Global scope only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GlobalDegradationPolicy {
    /// What happens on a capacity loss (default Degrade).
    #[serde(default)]
    pub on_capacity_loss: CapacityLossAction,
    /// With Degrade: an application still degraded by a capacity loss this
    /// long after it began is evicted (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_after: Option<super::time::DurationMs>,
    /// Applies only to applications below this priority (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_priority: Option<u32>,
}

impl GlobalDegradationPolicy {
    /// True when it applies to an application of `priority`.
    pub fn applies_to(&self, priority: u32) -> bool {
        self.below_priority.is_none_or(|b| priority < b)
    }

    fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(d) = self.evict_after {
            if d.0 == 0 {
                errs.push(FieldError::new(
                    join(path, "evictAfter"),
                    "must be more than 0 (use onCapacityLoss: Evict to evict at once)",
                ));
            }
            if self.on_capacity_loss == CapacityLossAction::Evict {
                errs.push(FieldError::new(
                    join(path, "evictAfter"),
                    "applies to onCapacityLoss: Degrade (Evict evicts at once)",
                ));
            }
        }
        errs
    }
}

/// The rules one policy sets; every field is optional. Merge semantics per
/// field are documented on [`crate::policy::EffectivePolicy`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyRules {
    /// Whether higher-priority applications may preempt lower ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_preemption: Option<bool>,
    /// Requests placed on a node may reach `capacity * ratio` (>= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_overcommit_ratio: Option<Ratio>,
    /// Runtime types workloads may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_runtime_types: Option<BTreeSet<RuntimeType>>,
    /// Images or binaries workloads may run: exact names, or prefixes
    /// ending in `*` (`registry.example.com/*`, `/usr/bin/*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_images: Option<Vec<String>>,
    /// Weight of the tenant in cross-tenant fair share (>= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_share_weight: Option<u32>,
    /// Largest share of the cluster (per cpu, memory, gpu) one application
    /// may hold, in (0, 1].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cluster_share: Option<Ratio>,
    /// Minimum spread of each workload's replicas over failure domains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_failure_domains: Option<SpreadRule>,
    /// Placement strategy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_strategy: Option<StrategyKind>,
    /// Fair share among the applications of one tenant (seed 000 §8.2.2
    /// `FairShareWithinTenant`): a same-tenant application is preempted only
    /// while it holds more than its equal part of what the tenant holds in
    /// the pool. Global or Tenant scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_share_within_tenant: Option<bool>,
    /// What the platform does to applications that lose capacity (seed 000
    /// §8.2.1 `GlobalDegradationPolicy`). Global scope only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_degradation: Option<GlobalDegradationPolicy>,
    /// The runtime security baseline (seed 000 §13.2.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<super::security::SecurityRules>,
}

impl PolicyRules {
    /// True when no rule is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Rules not allowed at scope `level` (0 global, 1 tenant, 2
    /// application); `path` is the rules' path.
    pub fn scope_errors(&self, level: u8, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if level >= 2 && self.fair_share_weight.is_some() {
            errs.push(FieldError::new(
                join(path, "fairShareWeight"),
                "fair-share weight is a tenant's weight; set it at Tenant or Global scope",
            ));
        }
        if level >= 2 && self.fair_share_within_tenant.is_some() {
            errs.push(FieldError::new(
                join(path, "fairShareWithinTenant"),
                "fairness among a tenant's applications is the tenant's rule; set it at Tenant or Global scope",
            ));
        }
        if level >= 1 && self.global_degradation.is_some() {
            errs.push(FieldError::new(
                join(path, "globalDegradation"),
                "the degradation policy is the platform's; set it at Global scope",
            ));
        }
        errs
    }

    /// Checks each rule's range; `path` is the rules' path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(r) = self.max_overcommit_ratio
            && r < Ratio::ONE
        {
            errs.push(FieldError::new(
                join(path, "maxOvercommitRatio"),
                format!("{r} is below 1 (1 means no overcommit)"),
            ));
        }
        if let Some(r) = self.max_cluster_share
            && (r.0 == 0 || r > Ratio::ONE)
        {
            errs.push(FieldError::new(
                join(path, "maxClusterShare"),
                format!("{r} is outside (0, 1]"),
            ));
        }
        if self.fair_share_weight == Some(0) {
            errs.push(FieldError::new(
                join(path, "fairShareWeight"),
                "must be at least 1",
            ));
        }
        if let Some(s) = &self.allowed_runtime_types
            && s.is_empty()
        {
            errs.push(FieldError::new(
                join(path, "allowedRuntimeTypes"),
                "an empty list allows nothing; leave it out to allow every type",
            ));
        }
        if let Some(list) = &self.allowed_images {
            let p = join(path, "allowedImages");
            if list.is_empty() {
                errs.push(FieldError::new(
                    &p,
                    "an empty list allows nothing; leave it out to allow every image",
                ));
            }
            for (i, pat) in list.iter().enumerate() {
                let star = pat.find('*');
                if pat.is_empty() || star.is_some_and(|s| s != pat.len() - 1) {
                    errs.push(FieldError::new(
                        format!("{p}[{i}]"),
                        format!("{pat:?}: use an exact name or a prefix ending in '*'"),
                    ));
                }
            }
        }
        if let Some(s) = &self.security {
            errs.extend(s.validate(&join(path, "security")));
        }
        if let Some(g) = &self.global_degradation {
            errs.extend(g.validate(&join(path, "globalDegradation")));
        }
        if let Some(s) = &self.min_failure_domains {
            let p = join(path, "minFailureDomains");
            if s.key.is_empty() {
                errs.push(FieldError::new(join(&p, "key"), "must not be empty"));
            }
            if s.count == 0 {
                errs.push(FieldError::new(join(&p, "count"), "must be at least 1"));
            }
        }
        errs
    }
}

/// True when `image` matches allow-list entry `pattern`.
pub fn image_matches(pattern: &str, image: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => image.starts_with(prefix),
        None => image == pattern,
    }
}

/// True when some image could match both patterns.
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    match (a.strip_suffix('*'), b.strip_suffix('*')) {
        (Some(pa), Some(pb)) => pa.starts_with(pb) || pb.starts_with(pa),
        (Some(pa), None) => b.starts_with(pa),
        (None, Some(pb)) => a.starts_with(pb),
        (None, None) => a == b,
    }
}

/// Where a policy applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyScope {
    /// Every tenant and application.
    Global,
    /// Every application of one tenant.
    Tenant {
        /// The tenant.
        tenant: String,
    },
    /// One application.
    Application {
        /// Its tenant.
        tenant: String,
        /// The application.
        application: String,
    },
}

impl PolicyScope {
    /// Level of the scope: 0 global, 1 tenant, 2 application.
    pub fn level(&self) -> u8 {
        match self {
            PolicyScope::Global => 0,
            PolicyScope::Tenant { .. } => 1,
            PolicyScope::Application { .. } => 2,
        }
    }
}

impl fmt::Display for PolicyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyScope::Global => f.write_str("global"),
            PolicyScope::Tenant { tenant } => write!(f, "tenant {tenant}"),
            PolicyScope::Application {
                tenant,
                application,
            } => write!(f, "application {tenant}/{application}"),
        }
    }
}

/// A named policy at one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Policy name (unique).
    pub name: String,
    /// Where it applies.
    pub scope: PolicyScope,
    /// What it sets.
    pub rules: PolicyRules,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_patterns() {
        assert!(image_matches(
            "registry.example.com/*",
            "registry.example.com/shop:1"
        ));
        assert!(!image_matches("registry.example.com/*", "docker.io/shop"));
        assert!(image_matches("/usr/bin/python3", "/usr/bin/python3"));
        assert!(patterns_overlap(
            "registry.example.com/*",
            "registry.example.com/team/*"
        ));
        assert!(!patterns_overlap("a/*", "b/*"));
        assert!(patterns_overlap("/usr/bin/*", "/usr/bin/python3"));
    }

    #[test]
    fn rule_ranges() {
        let r: PolicyRules = serde_json::from_str(
            r#"{"maxOvercommitRatio":0.5,"maxClusterShare":"150%","allowedImages":["a*b"]}"#,
        )
        .unwrap();
        let paths: Vec<_> = r
            .validate("spec.rules")
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.rules.maxOvercommitRatio",
                "spec.rules.maxClusterShare",
                "spec.rules.allowedImages[0]"
            ]
        );
    }
}
