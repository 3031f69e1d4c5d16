//! What a Policy document does to the applications already running under
//! its scope (seed 000 §8.3): one that no value could satisfy together with
//! the policies already in force for a running application is refused at
//! write, naming the application; one that a running application would no
//! longer pass admission under is applied, the application keeps running,
//! and the outcome says which applications an update would now be refused
//! for and why (each re-evaluation is recorded).

use super::Coordinator;
use crate::command::Outcome;
use crate::field::FieldError;
use crate::model::names::AppKey;
use crate::model::policy::{Policy, PolicyScope};
use crate::model::time::Timestamp;
use crate::policy::resolve;

/// Conflicts named at most, so that the refusal stays readable.
const MAX_NAMED: usize = 5;

impl Coordinator {
    /// Applications holding quota that `p`'s scope covers.
    fn covered_by(&self, p: &Policy) -> Vec<AppKey> {
        self.apps
            .values()
            .filter(|e| e.phase.holds_quota())
            .filter(|e| match &p.scope {
                PolicyScope::Global => true,
                PolicyScope::Tenant { tenant } => &e.key.tenant == tenant,
                PolicyScope::Application {
                    tenant,
                    application,
                } => &e.key.tenant == tenant && &e.key.name == application,
            })
            .map(|e| e.key.clone())
            .collect()
    }

    /// Why `p` cannot be written: it conflicts, for a running application,
    /// with the policies in force for it.
    pub(super) fn policy_conflicts(&self, p: &Policy) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for key in self.covered_by(p) {
            let Some(e) = self.apps.get(&key) else {
                continue;
            };
            let mut pols = self.policies_for(e.spec());
            pols.retain(|(n, _, _)| n != &p.name);
            pols.push((p.name.clone(), p.scope.clone(), p.rules.clone()));
            if let Err(c) = resolve(&super::apps::scoped_policies(&pols)) {
                errs.push(FieldError::new(
                    "spec.rules",
                    format!("for running application {key}: {c}"),
                ));
                if errs.len() == MAX_NAMED {
                    break;
                }
            }
        }
        errs
    }

    /// After `p` was written (or deleted): every running application it
    /// covers is evaluated again and takes the rules now in force for what
    /// it does next (placements, preemption, degradation); those that would
    /// not be admitted now are named.
    pub(super) fn policy_impact(&mut self, p: &Policy, now: Timestamp, out: &mut Outcome) {
        for key in self.covered_by(p) {
            let Some(e) = self.apps.get(&key) else {
                continue;
            };
            let (spec, targets, charge, version) =
                (e.spec().clone(), e.targets.clone(), e.charge, e.current);
            let ev = self.evaluate(&key, &spec, &targets, charge, version, now);
            if let (Some(eff), Some(e)) = (ev.effective.clone(), self.apps.get_mut(&key)) {
                e.effective = Some(eff);
                e.policies = ev.policies.clone();
                e.evaluation = Some(ev.evaluation);
            }
            if !ev.admitted() {
                out.notes.push(format!(
                    "policy {}: running application {key} would not be admitted now ({}); it keeps running, and an update of it will be refused until the policy or the application changes (evaluation {})",
                    p.name,
                    ev.failures(),
                    ev.evaluation
                ));
            }
        }
    }
}
