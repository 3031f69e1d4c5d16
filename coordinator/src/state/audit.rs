//! The audit trail (seed 000 §11.6): every command a caller asked (applied,
//! refused, or forbidden) becomes a record in the same raft entry as the
//! change itself, so that it is on every server, survives leader changes
//! and can be neither edited nor deleted through any API (no command does
//! either). Retention keeps the newest `retention.audit` records; what it
//! drops is announced by a `Compacted` record, never silently.

use super::Coordinator;
use crate::access::Actor;
use crate::command::Command;
use crate::model::time::Timestamp;
use crate::spec::Document;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum AuditOutcome {
    /// Applied.
    Applied,
    /// Allowed, but the coordinator refused it (invalid, conflict ...);
    /// nothing changed.
    Refused {
        /// Why.
        reason: String,
    },
    /// The caller may not do it; nothing changed.
    Forbidden {
        /// Who, what, which binding is missing.
        reason: String,
    },
    /// Records were dropped by retention (this record says which).
    Compacted {
        /// How many, in all, so far.
        dropped: u64,
    },
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Sequence number (1-based, never reused).
    pub seq: u64,
    /// When (the proposer's clock).
    pub time: Timestamp,
    /// The raft log index of the entry that carried it.
    pub index: u64,
    /// Who (a token resolved to its principal).
    pub principal: String,
    /// How it came (`socket uid 1001 on n1`, `token t1 on n1`, `node n2
    /// over the mesh`).
    pub source: String,
    /// What (`Apply`, `Operate.stop`, `Bind` ...).
    pub verb: String,
    /// Objects it named (`Application shop-team/shop`).
    pub objects: Vec<String>,
    /// Tenants they belong to (for filtering and the report).
    pub tenants: Vec<String>,
    /// How it ended.
    pub outcome: AuditOutcome,
}

/// A page of the trail.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    /// Records, oldest first.
    pub records: Vec<AuditRecord>,
    /// Records dropped by retention so far (older than what is held).
    pub compacted: u64,
}

/// Which records a reader wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditFilter {
    /// Only after this sequence number.
    #[serde(default)]
    pub after: u64,
    /// Only records touching this tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Only records of this principal.
    #[serde(default)]
    pub principal: Option<String>,
    /// Only records at or after this time.
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// At most this many (default 500).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The verb, objects and tenants of a command.
pub fn describe(cmd: &Command) -> (String, Vec<String>, Vec<String>) {
    let mut tenants = BTreeSet::new();
    let (verb, objects) = match cmd {
        Command::Apply { documents, .. } => {
            let objs = documents
                .iter()
                .map(|d| {
                    let name = match d {
                        Document::Application(a) => {
                            tenants.insert(a.key().tenant.clone());
                            a.key().to_string()
                        }
                        Document::Tenant(t) => {
                            tenants.insert(t.name.clone());
                            t.name.clone()
                        }
                        Document::Policy(p) => {
                            use crate::model::policy::PolicyScope;
                            if let PolicyScope::Tenant { tenant }
                            | PolicyScope::Application { tenant, .. } = &p.scope
                            {
                                tenants.insert(tenant.clone());
                            }
                            p.name.clone()
                        }
                        Document::ResourcePool(p) => p.name.clone(),
                        Document::Node(n) => n.name.clone(),
                        Document::Config(c) => {
                            tenants.insert(c.tenant.clone());
                            d.name()
                        }
                        Document::Secret(s) => {
                            tenants.insert(s.tenant.clone());
                            d.name()
                        }
                    };
                    format!("{} {name}", d.kind())
                })
                .collect();
            ("Apply".to_string(), objs)
        }
        Command::Operate { app, operation } => {
            tenants.insert(app.tenant.clone());
            let op = serde_json::to_value(operation)
                .ok()
                .and_then(|v| v.get("op").and_then(|o| o.as_str().map(str::to_string)))
                .unwrap_or_default();
            (format!("Operate.{op}"), vec![format!("Application {app}")])
        }
        Command::Rollback { app, version } => {
            tenants.insert(app.tenant.clone());
            (
                "Rollback".into(),
                vec![format!("Application {app} to version {version}")],
            )
        }
        Command::Bind { binding } => {
            if let Some(t) = &binding.tenant {
                tenants.insert(t.clone());
            }
            (
                "Bind".into(),
                vec![format!(
                    "RoleBinding {} ({} {} {})",
                    binding.name,
                    binding.principal,
                    binding.role,
                    binding
                        .tenant
                        .as_deref()
                        .map_or("everywhere".to_string(), |t| format!("in {t}"))
                )],
            )
        }
        Command::Record { verb, status, .. } => {
            return (verb.clone(), vec![format!("answered {status}")], Vec::new());
        }
        Command::Expect { app, then, .. } => {
            let (verb, objects, mut t) = describe(then);
            if !t.contains(&app.tenant) {
                t.push(app.tenant.clone());
            }
            return (verb, objects, t);
        }
        other => {
            let obj = match other {
                Command::DeleteNode { name } | Command::DrainNode { name } => {
                    format!("Node {name}")
                }
                Command::SetNodeCondition { node, condition } => {
                    format!("Node {node} {condition:?}")
                }
                Command::NodePressure { node, .. } => format!("Node {node}"),
                Command::RegisterNode { node } => format!("Node {}", node.name),
                Command::DeleteTenant { name } => {
                    tenants.insert(name.clone());
                    format!("Tenant {name}")
                }
                Command::DeletePolicy { name } | Command::RollbackPolicy { name, .. } => {
                    format!("Policy {name}")
                }
                Command::DeletePool { name } => format!("ResourcePool {name}"),
                Command::DeleteConfig { tenant, name } => {
                    tenants.insert(tenant.clone());
                    format!("Config {tenant}/{name}")
                }
                Command::DeleteSecret { tenant, name } => {
                    tenants.insert(tenant.clone());
                    format!("Secret {tenant}/{name}")
                }
                Command::Unbind { name } => format!("RoleBinding {name}"),
                Command::IssueToken { token } => {
                    format!("Token {} for {}", token.id, token.principal)
                }
                Command::RevokeToken { id } => format!("Token {id}"),
                _ => String::new(),
            };
            (
                other.name().to_string(),
                vec![obj].into_iter().filter(|o| !o.is_empty()).collect(),
            )
        }
    };
    (verb, objects, tenants.into_iter().collect())
}

/// Who asked, and the raft entry that carries the request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asker<'a> {
    /// As the agent saw it.
    pub actor: &'a Actor,
    /// What it acts as (a token resolved).
    pub principal: &'a str,
    /// The raft index.
    pub index: u64,
}

impl Coordinator {
    /// Appends a record, then trims the trail (announcing what was dropped).
    pub(super) fn audit(
        &mut self,
        Asker {
            actor,
            principal,
            index,
        }: Asker<'_>,
        (verb, objects, tenants): (String, Vec<String>, Vec<String>),
        outcome: AuditOutcome,
        now: Timestamp,
    ) {
        let seq = self.audit.next_pos() + 1;
        self.audit.push(AuditRecord {
            seq,
            time: now,
            index,
            principal: principal.to_string(),
            source: actor.source_text(),
            verb,
            objects,
            tenants,
            outcome,
        });
        let before = self.audit.dropped();
        if self.audit.trim(self.retention.audit) > 0 {
            let dropped = self.audit.dropped();
            let seq = self.audit.next_pos() + 1;
            self.audit.push(AuditRecord {
                seq,
                time: now,
                index,
                principal: "daros".into(),
                source: "retention".into(),
                verb: "Compacted".into(),
                objects: vec![format!(
                    "audit records {} to {} dropped (retention.audit = {})",
                    before + 1,
                    dropped,
                    self.retention.audit
                )],
                tenants: Vec::new(),
                outcome: AuditOutcome::Compacted { dropped },
            });
        }
    }

    /// Records matching `f` that a reader who may see `readable` tenants
    /// (`None`: all) may see; a tenant-scoped reader sees only records about
    /// its tenants.
    pub fn audit_page(&self, f: &AuditFilter, readable: Option<&BTreeSet<String>>) -> AuditPage {
        let limit = f.limit.unwrap_or(500).clamp(1, 5_000);
        let records = self
            .audit
            .as_slice()
            .iter()
            .filter(|r| r.seq > f.after)
            .filter(|r| f.since.is_none_or(|s| r.time >= s))
            .filter(|r| f.principal.as_ref().is_none_or(|p| &r.principal == p))
            .filter(|r| f.tenant.as_ref().is_none_or(|t| r.tenants.contains(t)))
            .filter(|r| readable.is_none_or(|set| r.tenants.iter().any(|t| set.contains(t))))
            .take(limit)
            .cloned()
            .collect();
        AuditPage {
            records,
            compacted: self.audit.dropped(),
        }
    }
}
