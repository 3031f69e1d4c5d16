//! The access check on the coordinator's side: what each command needs,
//! `apply_as` (check, apply, audit — in one state transition), the
//! commands that manage bindings and tokens, and what a reader may see.

use super::Coordinator;
use super::audit::{Asker, AuditOutcome};
use crate::access::token::{ApiToken, TokenView};
use crate::access::{AccessState, Actor, Need, Permission, RoleBinding};
use crate::command::{Command, OperationRequest, Outcome};
use crate::error::CoordinatorError;
use crate::model::policy::PolicyScope;
use crate::model::time::Timestamp;
use std::collections::BTreeSet;

impl Coordinator {
    /// The tenant a command on an existing policy or binding is scoped to.
    pub(super) fn scope_tenant_of(&self, cmd: &Command) -> Option<String> {
        match cmd {
            Command::DeletePolicy { name } | Command::RollbackPolicy { name, .. } => {
                match &self.policies.get(name)?.scope {
                    PolicyScope::Global => None,
                    PolicyScope::Tenant { tenant } | PolicyScope::Application { tenant, .. } => {
                        Some(tenant.clone())
                    }
                }
            }
            Command::Unbind { name } => self.access.bindings.get(name)?.tenant.clone(),
            _ => None,
        }
    }

    /// What `cmd` needs of its caller.
    pub fn needs(&self, cmd: &Command) -> Vec<Need> {
        use Permission as P;
        let mut n: Vec<Need> = match cmd {
            Command::Apply { documents, .. } => {
                let mut n: Vec<Need> = documents.iter().map(Need::for_document).collect();
                // Replacing a policy needs the right over the one replaced
                // too (a tenant's admin may not overwrite a global one).
                for d in documents {
                    if let crate::spec::Document::Policy(p) = d {
                        n.extend(self.policy_scope_needs(&p.name, None));
                    }
                }
                n
            }
            Command::Operate { app, operation } => vec![Need::tenant(
                if *operation == OperationRequest::Delete {
                    P::Develop
                } else {
                    P::Operate
                },
                &app.tenant,
            )],
            Command::Rollback { app, .. } => vec![Need::tenant(P::Develop, &app.tenant)],
            Command::RegisterNode { node } => vec![Need::OwnNode(node.name.clone())],
            Command::NodePressure { node, .. } | Command::NodeInventory { node, .. } => {
                vec![Need::OwnNode(node.clone())]
            }
            Command::DeletePolicy { name } => self.policy_scope_needs(name, None),
            Command::RollbackPolicy { name, version } => {
                self.policy_scope_needs(name, Some(*version))
            }
            Command::Unbind { name } => vec![self.binding_need(name)],
            Command::DeleteConfig { tenant, .. } | Command::DeleteSecret { tenant, .. } => {
                vec![Need::tenant(P::Develop, tenant)]
            }
            Command::Bind { binding } => {
                let mut n = vec![match &binding.tenant {
                    Some(t) => Need::tenant(P::TenantAdmin, t),
                    None => Need::global(P::PlatformAdmin),
                }];
                // Replacing a binding needs the right over the one replaced.
                if self.access.bindings.contains_key(&binding.name) {
                    n.push(self.binding_need(&binding.name));
                }
                n
            }
            Command::Expect { app, then, .. } => {
                // The answer tells the version: reading it is needed too.
                let mut n = self.needs(then);
                n.push(Need::tenant(P::Read, &app.tenant));
                n
            }
            Command::DeleteNode { .. }
            | Command::DrainNode { .. }
            | Command::SetNodeCondition { .. }
            | Command::DeleteTenant { .. }
            | Command::DeletePool { .. }
            | Command::ReportWorkload { .. }
            | Command::ReportWorkloads { .. }
            | Command::ReportInitJob { .. }
            | Command::Tick
            | Command::SetRetention { .. }
            | Command::IssueToken { .. }
            | Command::RevokeToken { .. } => vec![Need::global(P::PlatformAdmin)],
            // The agent decided that request; any caller's is recorded.
            Command::Record { .. } => vec![],
        };
        if n.is_empty() {
            n.push(Need::global(P::Read));
        }
        n.sort();
        n.dedup();
        n
    }

    /// What acting on policy `name` needs: the right over the scope it
    /// holds now or last held (and, for a rollback, the version restored).
    fn policy_scope_needs(&self, name: &str, version: Option<u32>) -> Vec<Need> {
        let need = |s: &PolicyScope| match s {
            PolicyScope::Global => Need::global(Permission::PlatformAdmin),
            PolicyScope::Tenant { tenant } | PolicyScope::Application { tenant, .. } => {
                Need::tenant(Permission::TenantAdmin, tenant)
            }
        };
        let mut n: Vec<Need> = self
            .policies
            .get(name)
            .map(|p| need(&p.scope))
            .into_iter()
            .collect();
        if let Some(vs) = self.policy_versions.get(name) {
            let last = vs.iter().rev().find_map(|v| v.policy.as_ref());
            n.extend(last.map(|p| need(&p.scope)));
            if let Some(v) = version {
                n.extend(
                    vs.iter()
                        .filter(|x| x.version == v)
                        .filter_map(|x| x.policy.as_ref())
                        .map(|p| need(&p.scope)),
                );
            }
        }
        if n.is_empty() && version.is_some() {
            n.push(Need::global(Permission::PlatformAdmin));
        }
        n
    }

    /// What removing or replacing binding `name` needs.
    fn binding_need(&self, name: &str) -> Need {
        match self.access.bindings.get(name).map(|b| b.tenant.clone()) {
            Some(Some(t)) => Need::tenant(Permission::TenantAdmin, &t),
            _ => Need::global(Permission::PlatformAdmin),
        }
    }

    /// Applies `cmd` for `actor` (raft entry `index`): the access check, then
    /// the command, and the audit record of either, in one transition.
    pub fn apply_as(
        &mut self,
        actor: &Actor,
        index: u64,
        cmd: Command,
        now: Timestamp,
    ) -> Result<Outcome, CoordinatorError> {
        // Described before it runs: a removal's tenant is looked up while
        // the policy or binding still exists.
        let (verb, objects, mut tenants) = super::audit::describe(&cmd);
        if let Some(t) = self.scope_tenant_of(&cmd)
            && !tenants.contains(&t)
        {
            tenants.push(t);
        }
        let what = format!("{verb} {}", objects.join(", "));
        let described = (verb, objects, tenants);
        let (principal, outcome, result) = if let Command::Record { status, reason, .. } = &cmd {
            let principal = self
                .access
                .resolve(actor, now)
                .unwrap_or_else(|_| actor.principal.clone());
            let outcome = match (status, reason) {
                (200..=299, _) => AuditOutcome::Applied,
                (403, r) => AuditOutcome::Forbidden {
                    reason: r.clone().unwrap_or_default(),
                },
                (s, r) => AuditOutcome::Refused {
                    reason: r.clone().unwrap_or_else(|| format!("HTTP {s}")),
                },
            };
            (principal, outcome, Ok(Outcome::default()))
        } else {
            let needs = self.needs(&cmd);
            match self.access.check(actor, what.trim(), &needs, now) {
                Err(denied) => (
                    denied.principal.clone(),
                    AuditOutcome::Forbidden {
                        reason: denied.to_string(),
                    },
                    Err(CoordinatorError::Forbidden(denied)),
                ),
                Ok(principal) => {
                    let r = self.apply(cmd, now);
                    let outcome = match &r {
                        Ok(_) => AuditOutcome::Applied,
                        Err(e) => AuditOutcome::Refused {
                            reason: e.to_string(),
                        },
                    };
                    (principal, outcome, r)
                }
            }
        };
        self.audit(
            Asker {
                actor,
                principal: &principal,
                index,
            },
            described,
            outcome,
            now,
        );
        result
    }

    /// Checks that `actor` may read (in `tenant`, or cluster-wide); the
    /// principal it acts as.
    pub fn authorize(
        &self,
        actor: &Actor,
        what: &str,
        need: &Need,
        now: Timestamp,
    ) -> Result<String, CoordinatorError> {
        Ok(self
            .access
            .check(actor, what, std::slice::from_ref(need), now)?)
    }

    /// The tenants `actor` may read (`None`: every one); an invalid token
    /// reads nothing.
    pub fn readable_tenants(&self, actor: &Actor, now: Timestamp) -> Option<BTreeSet<String>> {
        match self.access.resolve(actor, now) {
            Ok(p) => self.access.readable_tenants(&p),
            Err(_) => Some(BTreeSet::new()),
        }
    }

    /// The bindings and the tokens (without their hashes).
    pub fn access_view(&self) -> (Vec<RoleBinding>, Vec<TokenView>) {
        (
            self.access.bindings.values().cloned().collect(),
            self.access.tokens.values().map(TokenView::from).collect(),
        )
    }

    /// The replicated access state (bindings, tokens).
    pub fn access(&self) -> &AccessState {
        &self.access
    }

    pub(super) fn cmd_bind(&mut self, b: RoleBinding) -> Result<(), CoordinatorError> {
        let errors = b.validate();
        if !errors.is_empty() {
            return Err(CoordinatorError::Invalid {
                kind: "RoleBinding".into(),
                name: b.name.clone(),
                errors,
            });
        }
        if let Some(t) = &b.tenant
            && !self.tenants.contains_key(t)
        {
            return Err(CoordinatorError::Invalid {
                kind: "RoleBinding".into(),
                name: b.name.clone(),
                errors: vec![crate::field::FieldError::new(
                    "tenant",
                    format!("no tenant {t}"),
                )],
            });
        }
        self.access.bindings.insert(b.name.clone(), b);
        Ok(())
    }

    pub(super) fn cmd_unbind(&mut self, name: &str) -> Result<(), CoordinatorError> {
        self.access
            .bindings
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| CoordinatorError::NotFound(format!("role binding {name}")))
    }

    pub(super) fn cmd_issue_token(&mut self, t: ApiToken) -> Result<(), CoordinatorError> {
        let mut errors = Vec::new();
        if t.id.is_empty() || !t.id.chars().all(|c| c.is_ascii_alphanumeric()) {
            errors.push(crate::field::FieldError::new("id", "letters and digits"));
        }
        if t.sha256.len() != 64 || !t.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
            errors.push(crate::field::FieldError::new("sha256", "64 hex characters"));
        }
        if !crate::access::binding::principal_ok(&t.principal) {
            errors.push(crate::field::FieldError::new(
                "principal",
                format!(
                    "{:?}: expected user:<name>, uid:<n>, node:<name> or root",
                    t.principal
                ),
            ));
        }
        if self.access.tokens.contains_key(&t.id) {
            errors.push(crate::field::FieldError::new(
                "id",
                format!("token {} exists", t.id),
            ));
        }
        if !errors.is_empty() {
            return Err(CoordinatorError::Invalid {
                kind: "Token".into(),
                name: t.id.clone(),
                errors,
            });
        }
        self.access.tokens.insert(t.id.clone(), t);
        Ok(())
    }

    pub(super) fn cmd_revoke_token(
        &mut self,
        id: &str,
        now: Timestamp,
    ) -> Result<(), CoordinatorError> {
        let t = self
            .access
            .tokens
            .get_mut(id)
            .ok_or_else(|| CoordinatorError::NotFound(format!("token {id}")))?;
        t.revoked.get_or_insert(now);
        Ok(())
    }
}
