//! Policy resolution Global > Tenant > Application (seed 000 §8.3): the
//! tighter bound wins, a real conflict (no value satisfies every scope) is an
//! error naming both policies, and every field records who decided it.

use crate::model::policy::{
    GlobalDegradationPolicy, PolicyRules, PolicyScope, SpreadRule, StrategyKind, patterns_overlap,
};
use crate::model::ratio::Ratio;
use crate::model::runtime::RuntimeType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// One policy as input to resolution.
#[derive(Debug, Clone, Copy)]
pub struct ScopedPolicy<'a> {
    /// Policy name.
    pub name: &'a str,
    /// Its scope.
    pub scope: &'a PolicyScope,
    /// Its rules.
    pub rules: &'a PolicyRules,
}

/// An allow-list of images from one policy; an image must match every list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageAllowList {
    /// Policy that set it.
    pub policy: String,
    /// Its patterns.
    pub patterns: Vec<String>,
}

/// The rules in force for one application after resolution.
///
/// Merge rule per field (higher scope = Global, then Tenant, then
/// Application):
/// - `enablePreemption`: enabled only by a Global or Tenant scope, and only
///   if no scope says false (default false): an application cannot switch
///   on taking other applications' instances by itself;
/// - `maxOvercommitRatio`, `maxClusterShare`: the smallest value wins
///   (default 1 and none);
/// - `allowedRuntimeTypes`: intersection; an empty intersection is a conflict;
/// - `allowedImages`: every list applies; a list with no pattern that can
///   match any pattern of a higher-scope list is a conflict;
/// - `minFailureDomains`: the largest count wins; different keys conflict;
/// - `fairShareWeight`, `placementStrategy`, `fairShareWithinTenant`: the
///   most specific scope that sets it wins (defaults 1, bin-pack, false);
/// - `globalDegradation`: Global scope only; two Global policies asking
///   different ones conflict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectivePolicy {
    /// May this application preempt lower priorities.
    pub enable_preemption: bool,
    /// Overcommit ratio for cpu requests.
    pub max_overcommit_ratio: Ratio,
    /// Allowed runtime types (`None` = all).
    pub allowed_runtime_types: Option<BTreeSet<RuntimeType>>,
    /// Image allow-lists, all of which apply.
    pub allowed_images: Vec<ImageAllowList>,
    /// Tenant weight in fair share.
    pub fair_share_weight: u32,
    /// Largest share of the cluster.
    pub max_cluster_share: Option<Ratio>,
    /// Minimum failure-domain spread of each workload's replicas.
    pub min_failure_domains: Option<SpreadRule>,
    /// Placement strategy.
    pub placement_strategy: StrategyKind,
    /// A same-tenant application is preempted only above its equal part of
    /// the tenant's holding in the pool.
    #[serde(default)]
    pub fair_share_within_tenant: bool,
    /// The platform's degradation policy, with the policy that set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_degradation: Option<DegradationInForce>,
    /// The runtime security baseline.
    #[serde(default)]
    pub security: super::security::SecurityBaseline,
}

/// The Global degradation policy in force for an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DegradationInForce {
    /// Policy that set it.
    pub policy: String,
    /// The rule.
    pub rule: GlobalDegradationPolicy,
}

impl Default for EffectivePolicy {
    fn default() -> Self {
        Self {
            enable_preemption: false,
            max_overcommit_ratio: Ratio::ONE,
            allowed_runtime_types: None,
            allowed_images: Vec::new(),
            fair_share_weight: 1,
            max_cluster_share: None,
            min_failure_domains: None,
            placement_strategy: StrategyKind::BinPack,
            fair_share_within_tenant: false,
            global_degradation: None,
            security: super::security::SecurityBaseline::default(),
        }
    }
}

/// How one field was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// Field name as in specs (`maxOvercommitRatio`).
    pub field: String,
    /// Value in force.
    pub value: String,
    /// Policy that decided it (`default` when none set it).
    pub decided_by: String,
    /// Merge rule applied.
    pub rule: String,
    /// Values asked by other policies that did not win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overridden: Vec<Override>,
}

/// A value a policy asked for that did not win.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The policy.
    pub policy: String,
    /// What it asked.
    pub asked: String,
}

/// Two policies that no value can satisfy together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error(
    "policy conflict on {field}: {lower} ({lower_scope}) asks {lower_value} but {higher} ({higher_scope}) allows {higher_value}: {reason}"
)]
pub struct PolicyConflict {
    /// Field in conflict.
    pub field: String,
    /// Higher-scope policy.
    pub higher: String,
    /// Its scope.
    pub higher_scope: String,
    /// What it sets.
    pub higher_value: String,
    /// Lower-scope policy.
    pub lower: String,
    /// Its scope.
    pub lower_scope: String,
    /// What it sets.
    pub lower_value: String,
    /// Why they cannot both hold.
    pub reason: String,
}

fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = items.into_iter().map(|t| t.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// Resolves `policies` (any order; sorted here by scope level, then name).
pub fn resolve(
    policies: &[ScopedPolicy<'_>],
) -> Result<(EffectivePolicy, Vec<Resolution>), Box<PolicyConflict>> {
    let mut ps: Vec<&ScopedPolicy<'_>> = policies.iter().collect();
    ps.sort_by(|a, b| (a.scope.level(), a.name).cmp(&(b.scope.level(), b.name)));
    let mut eff = EffectivePolicy::default();
    let mut res = Vec::new();

    // enablePreemption: false anywhere wins; true counts only from a Global
    // or Tenant scope (an application scope may only switch it off).
    let set: Vec<(&str, bool)> = ps
        .iter()
        .filter_map(|p| p.rules.enable_preemption.map(|v| (p.name, v)))
        .collect();
    let counts: Vec<(&str, bool)> = ps
        .iter()
        .filter_map(|p| {
            p.rules
                .enable_preemption
                .filter(|v| !v || p.scope.level() < 2)
                .map(|v| (p.name, v))
        })
        .collect();
    if !set.is_empty() {
        let winner = counts
            .iter()
            .find(|(_, v)| !v)
            .or(counts.first())
            .copied()
            .unwrap_or(("default", false));
        eff.enable_preemption = winner.1;
        res.push(Resolution {
            field: "enablePreemption".into(),
            value: winner.1.to_string(),
            decided_by: winner.0.into(),
            rule: "enabled only by a Global or Tenant scope, and only if no scope forbids it"
                .into(),
            overridden: overrides(&set, |v| *v != winner.1),
        });
    }

    // Upper bounds: smallest wins, highest scope on ties.
    for (field, get, target) in [
        (
            "maxOvercommitRatio",
            (|r: &PolicyRules| r.max_overcommit_ratio) as fn(&PolicyRules) -> Option<Ratio>,
            0,
        ),
        ("maxClusterShare", |r: &PolicyRules| r.max_cluster_share, 1),
    ] {
        let set: Vec<(&str, Ratio)> = ps
            .iter()
            .filter_map(|p| get(p.rules).map(|v| (p.name, v)))
            .collect();
        let Some(min) = set.iter().map(|(_, v)| *v).min() else {
            continue;
        };
        let winner = set.iter().find(|(_, v)| *v == min).unwrap_or(&set[0]);
        if target == 0 {
            eff.max_overcommit_ratio = min;
        } else {
            eff.max_cluster_share = Some(min);
        }
        res.push(Resolution {
            field: field.into(),
            value: min.to_string(),
            decided_by: winner.0.into(),
            rule: "the tighter bound wins".into(),
            overridden: overrides(&set, |v| *v != min),
        });
    }

    // allowedRuntimeTypes: intersection.
    let mut acc: Option<(BTreeSet<RuntimeType>, &ScopedPolicy<'_>)> = None;
    let mut contributors = Vec::new();
    for p in &ps {
        let Some(types) = &p.rules.allowed_runtime_types else {
            continue;
        };
        contributors.push(p.name.to_string());
        acc = Some(match acc {
            None => (types.clone(), *p),
            Some((cur, first)) => {
                let inter: BTreeSet<RuntimeType> = cur.intersection(types).copied().collect();
                if inter.is_empty() {
                    return Err(Box::new(PolicyConflict {
                        field: "allowedRuntimeTypes".into(),
                        higher: first.name.into(),
                        higher_scope: first.scope.to_string(),
                        higher_value: list(&cur),
                        lower: p.name.into(),
                        lower_scope: p.scope.to_string(),
                        lower_value: list(types),
                        reason: "no runtime type is allowed by both".into(),
                    }));
                }
                (inter, first)
            }
        });
    }
    if let Some((types, _)) = acc {
        res.push(Resolution {
            field: "allowedRuntimeTypes".into(),
            value: list(&types),
            decided_by: contributors.join(" + "),
            rule: "intersection of every scope".into(),
            overridden: Vec::new(),
        });
        eff.allowed_runtime_types = Some(types);
    }

    // allowedImages: every list applies; disjoint lists conflict.
    for p in &ps {
        let Some(patterns) = &p.rules.allowed_images else {
            continue;
        };
        for higher in &eff.allowed_images {
            let overlap = patterns
                .iter()
                .any(|a| higher.patterns.iter().any(|b| patterns_overlap(a, b)));
            if !overlap {
                let hp = ps.iter().find(|q| q.name == higher.policy);
                return Err(Box::new(PolicyConflict {
                    field: "allowedImages".into(),
                    higher: higher.policy.clone(),
                    higher_scope: hp.map(|q| q.scope.to_string()).unwrap_or_default(),
                    higher_value: list(&higher.patterns),
                    lower: p.name.into(),
                    lower_scope: p.scope.to_string(),
                    lower_value: list(patterns),
                    reason: "no image can match both allow-lists".into(),
                }));
            }
        }
        eff.allowed_images.push(ImageAllowList {
            policy: p.name.into(),
            patterns: patterns.clone(),
        });
    }
    if !eff.allowed_images.is_empty() {
        res.push(Resolution {
            field: "allowedImages".into(),
            value: eff
                .allowed_images
                .iter()
                .map(|l| list(&l.patterns))
                .collect::<Vec<_>>()
                .join(" and "),
            decided_by: eff
                .allowed_images
                .iter()
                .map(|l| l.policy.clone())
                .collect::<Vec<_>>()
                .join(" + "),
            rule: "an image must match every scope's list".into(),
            overridden: Vec::new(),
        });
    }

    // minFailureDomains: same key everywhere, largest count.
    let mut spread: Option<(SpreadRule, &ScopedPolicy<'_>)> = None;
    let mut asked = Vec::new();
    for p in &ps {
        let Some(rule) = &p.rules.min_failure_domains else {
            continue;
        };
        asked.push((p.name, rule.count));
        spread = Some(match spread {
            None => (rule.clone(), *p),
            Some((cur, by)) => {
                if cur.key != rule.key {
                    return Err(Box::new(PolicyConflict {
                        field: "minFailureDomains".into(),
                        higher: by.name.into(),
                        higher_scope: by.scope.to_string(),
                        higher_value: format!("{} {}", cur.count, cur.key),
                        lower: p.name.into(),
                        lower_scope: p.scope.to_string(),
                        lower_value: format!("{} {}", rule.count, rule.key),
                        reason: "spread is measured over one failure-domain key".into(),
                    }));
                }
                if rule.count > cur.count {
                    (rule.clone(), *p)
                } else {
                    (cur, by)
                }
            }
        });
    }
    if let Some((rule, by)) = spread {
        res.push(Resolution {
            field: "minFailureDomains".into(),
            value: format!("{} {}", rule.count, rule.key),
            decided_by: by.name.into(),
            rule: "the larger spread wins".into(),
            overridden: overrides(&asked, |c| *c != rule.count),
        });
        eff.min_failure_domains = Some(rule);
    }

    // Preferences: most specific scope wins.
    let weights: Vec<(&str, u32)> = ps
        .iter()
        .filter_map(|p| p.rules.fair_share_weight.map(|v| (p.name, v)))
        .collect();
    if let Some(&(by, w)) = weights.last() {
        eff.fair_share_weight = w;
        res.push(Resolution {
            field: "fairShareWeight".into(),
            value: w.to_string(),
            decided_by: by.into(),
            rule: "the most specific scope wins".into(),
            overridden: overrides(&weights[..weights.len() - 1], |_| true),
        });
    }
    let strategies: Vec<(&str, StrategyKind)> = ps
        .iter()
        .filter_map(|p| p.rules.placement_strategy.map(|v| (p.name, v)))
        .collect();
    if let Some(&(by, s)) = strategies.last() {
        eff.placement_strategy = s;
        res.push(Resolution {
            field: "placementStrategy".into(),
            value: s.to_string(),
            decided_by: by.into(),
            rule: "the most specific scope wins".into(),
            overridden: overrides(&strategies[..strategies.len() - 1], |_| true),
        });
    }
    eff.security = super::security::resolve_security(&ps);
    if !eff.security.decided_by.is_empty() {
        res.push(Resolution {
            field: "security".into(),
            value: format!("{} rule(s) set", eff.security.decided_by.len()),
            decided_by: eff
                .security
                .decided_by
                .values()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(" + "),
            rule: "the tighter value wins; lists intersect".into(),
            overridden: Vec::new(),
        });
    }
    let within: Vec<(&str, bool)> = ps
        .iter()
        .filter(|p| p.scope.level() < 2)
        .filter_map(|p| p.rules.fair_share_within_tenant.map(|v| (p.name, v)))
        .collect();
    if let Some(&(by, v)) = within.last() {
        eff.fair_share_within_tenant = v;
        res.push(Resolution {
            field: "fairShareWithinTenant".into(),
            value: v.to_string(),
            decided_by: by.into(),
            rule: "the most specific of Global and Tenant scope wins".into(),
            overridden: overrides(&within[..within.len() - 1], |_| true),
        });
    }
    let mut degradation: Option<(&ScopedPolicy<'_>, GlobalDegradationPolicy)> = None;
    for p in ps.iter().filter(|p| p.scope.level() == 0) {
        let Some(rule) = p.rules.global_degradation else {
            continue;
        };
        match degradation {
            Some((by, cur)) if cur != rule => {
                return Err(Box::new(PolicyConflict {
                    field: "globalDegradation".into(),
                    higher: by.name.into(),
                    higher_scope: by.scope.to_string(),
                    higher_value: format!("{cur:?}"),
                    lower: p.name.into(),
                    lower_scope: p.scope.to_string(),
                    lower_value: format!("{rule:?}"),
                    reason: "the platform has one degradation policy".into(),
                }));
            }
            Some(_) => {}
            None => degradation = Some((*p, rule)),
        }
    }
    if let Some((by, rule)) = degradation {
        res.push(Resolution {
            field: "globalDegradation".into(),
            value: format!("{rule:?}"),
            decided_by: by.name.into(),
            rule: "Global scope only".into(),
            overridden: Vec::new(),
        });
        eff.global_degradation = Some(DegradationInForce {
            policy: by.name.into(),
            rule,
        });
    }
    Ok((eff, res))
}

fn overrides<T: fmt::Display>(set: &[(&str, T)], lost: impl Fn(&T) -> bool) -> Vec<Override> {
    set.iter()
        .filter(|(_, v)| lost(v))
        .map(|(p, v)| Override {
            policy: (*p).into(),
            asked: v.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(json: &str) -> PolicyRules {
        serde_json::from_str(json).unwrap()
    }

    fn tenant() -> PolicyScope {
        PolicyScope::Tenant { tenant: "t".into() }
    }
    fn app() -> PolicyScope {
        PolicyScope::Application {
            tenant: "t".into(),
            application: "a".into(),
        }
    }

    /// Seed §8.3: global 1.5, tenant 1.2, application asks 1.3 → 1.2.
    #[test]
    fn seed_overcommit_merge_example() {
        let (g, t, a) = (
            rules(r#"{"maxOvercommitRatio":1.5}"#),
            rules(r#"{"maxOvercommitRatio":1.2}"#),
            rules(r#"{"maxOvercommitRatio":1.3}"#),
        );
        let (ts, as_) = (tenant(), app());
        let input = [
            ScopedPolicy {
                name: "app-policy",
                scope: &as_,
                rules: &a,
            },
            ScopedPolicy {
                name: "global",
                scope: &PolicyScope::Global,
                rules: &g,
            },
            ScopedPolicy {
                name: "tenant-policy",
                scope: &ts,
                rules: &t,
            },
        ];
        let (eff, res) = resolve(&input).unwrap();
        assert_eq!(eff.max_overcommit_ratio, Ratio(1200));
        let r = &res[0];
        assert_eq!(r.field, "maxOvercommitRatio");
        assert_eq!(r.decided_by, "tenant-policy");
        assert_eq!(
            r.overridden,
            [
                Override {
                    policy: "global".into(),
                    asked: "1.5".into()
                },
                Override {
                    policy: "app-policy".into(),
                    asked: "1.3".into()
                }
            ]
        );
    }

    #[test]
    fn disjoint_runtime_types_conflict() {
        let (g, a) = (
            rules(r#"{"allowedRuntimeTypes":["container","process"]}"#),
            rules(r#"{"allowedRuntimeTypes":["vm"]}"#),
        );
        let as_ = app();
        let e = resolve(&[
            ScopedPolicy {
                name: "global",
                scope: &PolicyScope::Global,
                rules: &g,
            },
            ScopedPolicy {
                name: "mine",
                scope: &as_,
                rules: &a,
            },
        ])
        .unwrap_err();
        assert_eq!(e.field, "allowedRuntimeTypes");
        assert_eq!(
            e.to_string(),
            "policy conflict on allowedRuntimeTypes: mine (application t/a) asks [vm] but global (global) allows [container, process]: no runtime type is allowed by both"
        );
    }

    #[test]
    fn intersections_and_preferences() {
        let (g, t, a) = (
            rules(
                r#"{"allowedRuntimeTypes":["container","process"],"enablePreemption":true,"placementStrategy":"bin-pack","allowedImages":["registry.example.com/*"]}"#,
            ),
            rules(
                r#"{"allowedRuntimeTypes":["process","vm"],"enablePreemption":false,"fairShareWeight":3,"minFailureDomains":{"key":"rack","count":2}}"#,
            ),
            rules(
                r#"{"enablePreemption":true,"placementStrategy":"spread","allowedImages":["registry.example.com/shop/*"],"minFailureDomains":{"key":"rack","count":3}}"#,
            ),
        );
        let (ts, as_) = (tenant(), app());
        let (eff, _) = resolve(&[
            ScopedPolicy {
                name: "g",
                scope: &PolicyScope::Global,
                rules: &g,
            },
            ScopedPolicy {
                name: "t",
                scope: &ts,
                rules: &t,
            },
            ScopedPolicy {
                name: "a",
                scope: &as_,
                rules: &a,
            },
        ])
        .unwrap();
        assert_eq!(
            eff.allowed_runtime_types,
            Some(BTreeSet::from([RuntimeType::Process]))
        );
        assert!(!eff.enable_preemption);
        assert_eq!(eff.placement_strategy, StrategyKind::Spread);
        assert_eq!(eff.fair_share_weight, 3);
        assert_eq!(eff.allowed_images.len(), 2);
        assert_eq!(eff.min_failure_domains.unwrap().count, 3);
    }

    #[test]
    fn disjoint_images_and_spread_keys_conflict() {
        let (g, a) = (
            rules(
                r#"{"allowedImages":["registry.example.com/*"],"minFailureDomains":{"key":"rack","count":2}}"#,
            ),
            rules(r#"{"allowedImages":["docker.io/*"]}"#),
        );
        let as_ = app();
        let e = resolve(&[
            ScopedPolicy {
                name: "g",
                scope: &PolicyScope::Global,
                rules: &g,
            },
            ScopedPolicy {
                name: "a",
                scope: &as_,
                rules: &a,
            },
        ])
        .unwrap_err();
        assert_eq!(e.field, "allowedImages");
        let b = rules(r#"{"minFailureDomains":{"key":"zone","count":2}}"#);
        let e = resolve(&[
            ScopedPolicy {
                name: "g",
                scope: &PolicyScope::Global,
                rules: &g,
            },
            ScopedPolicy {
                name: "a",
                scope: &as_,
                rules: &b,
            },
        ])
        .unwrap_err();
        assert_eq!(e.field, "minFailureDomains");
    }

    #[test]
    fn defaults_without_policies() {
        let (eff, res) = resolve(&[]).unwrap();
        assert_eq!(eff, EffectivePolicy::default());
        assert!(res.is_empty());
    }
}
