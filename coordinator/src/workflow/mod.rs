//! Workflows (seed 002 Q2): an optional `workflow.steps` section of an
//! application that orders what its deployment does. A step has a `type` —
//! `deploy` (starts named workloads, done when they are ready), `approval`
//! (waits for `darosctl workflow approve`), `group` (child `steps`, run in
//! `parallel` or `serial`), or a registered job type ([`crate::jobs`]) —
//! `properties` for its type, `dependsOn` (steps of the same level), a
//! `timeout` and `retries`. Without a workflow the application deploys as
//! before (every workload by its `dependsOn` DAG): that is the default
//! workflow.
//!
//! ```yaml
//! workflow:
//!   steps:
//!     - {name: db, type: deploy, properties: {workloads: [redis]}}
//!     - name: checks
//!       type: group
//!       mode: parallel
//!       dependsOn: [db]
//!       steps:
//!         - {name: schema, type: command, properties: {command: /usr/bin/redis-cli, args: [ping]}}
//!         - {name: eval, type: ai-eval, properties: {model: m1}}
//!     - {name: go, type: approval, dependsOn: [checks]}
//!     - {name: web, type: deploy, dependsOn: [go], properties: {workloads: [web]}}
//! ```

pub mod run;

use crate::field::FieldError;
use crate::model::application::ApplicationSpec;
use crate::model::time::DurationMs;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The workflow of an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    /// Top-level steps.
    pub steps: Vec<Step>,
}

/// How a group runs its steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GroupMode {
    /// All at once (default).
    #[default]
    Parallel,
    /// One after another, in order.
    Serial,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    /// Name, unique in the workflow (a DNS label).
    pub name: String,
    /// `deploy`, `approval`, `group` or a registered job type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Settings of its type.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub properties: serde_json::Value,
    /// Steps of the same level that must succeed first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// A job step not done by then fails (its run is stopped); default the
    /// job type's longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationMs>,
    /// Runs again after a failure, at most this many times (job steps).
    #[serde(default)]
    pub retries: u32,
    /// A group's mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GroupMode>,
    /// A group's steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

/// Most steps in one workflow.
pub const MAX_STEPS: usize = 200;

/// `properties` of a `deploy` step.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployProperties {
    /// Workloads it starts (with their `dependsOn` order among them).
    pub workloads: Vec<String>,
}

impl Step {
    /// Deploy properties, when it is a deploy step whose properties read.
    pub fn deploys(&self) -> Option<DeployProperties> {
        (self.kind == "deploy")
            .then(|| crate::traits::read_properties(&self.properties, "").ok())
            .flatten()
    }
}

impl Workflow {
    /// Every step, depth first, with its parent's name.
    pub fn all(&self) -> Vec<(&Step, Option<&str>)> {
        fn walk<'a>(
            steps: &'a [Step],
            parent: Option<&'a str>,
            out: &mut Vec<(&'a Step, Option<&'a str>)>,
        ) {
            for s in steps {
                out.push((s, parent));
                walk(&s.steps, Some(&s.name), out);
            }
        }
        let mut out = Vec::new();
        walk(&self.steps, None, &mut out);
        out
    }

    /// The step named `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.all()
            .into_iter()
            .map(|(s, _)| s)
            .find(|s| s.name == name)
    }

    /// Checks the workflow of `spec`; `path` is `spec.workflow`.
    pub fn validate(&self, spec: &ApplicationSpec, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let all = self.all();
        if self.steps.is_empty() {
            errs.push(FieldError::new(
                format!("{path}.steps"),
                "must name at least one step",
            ));
        }
        if all.len() > MAX_STEPS {
            errs.push(FieldError::new(
                format!("{path}.steps"),
                format!("{} steps; at most {MAX_STEPS}", all.len()),
            ));
        }
        let mut names = BTreeSet::new();
        let mut deployed: BTreeMap<String, String> = BTreeMap::new();
        validate_level(
            &self.steps,
            &format!("{path}.steps"),
            spec,
            &mut names,
            &mut deployed,
            &mut errs,
        );
        for w in &spec.workloads {
            if !deployed.contains_key(&w.name) {
                errs.push(FieldError::new(
                    format!("{path}.steps"),
                    format!("workload {:?} is deployed by no step (name it in a deploy step's properties.workloads)", w.name),
                ));
            }
        }
        errs
    }
}

fn validate_level(
    steps: &[Step],
    path: &str,
    spec: &ApplicationSpec,
    names: &mut BTreeSet<String>,
    deployed: &mut BTreeMap<String, String>,
    errs: &mut Vec<FieldError>,
) {
    let here: BTreeSet<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    for (i, s) in steps.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if let Some(e) = crate::model::names::check_name(&format!("{at}.name"), &s.name) {
            errs.push(e);
        }
        if !names.insert(s.name.clone()) {
            errs.push(FieldError::new(
                format!("{at}.name"),
                format!(
                    "{:?} names two steps; step names are unique in the workflow",
                    s.name
                ),
            ));
        }
        for (j, d) in s.depends_on.iter().enumerate() {
            if d == &s.name || !here.contains(d.as_str()) {
                errs.push(FieldError::new(
                    format!("{at}.dependsOn[{j}]"),
                    format!("{d:?} is not another step of this level"),
                ));
            }
        }
        if s.timeout == Some(DurationMs(0)) {
            errs.push(FieldError::new(
                format!("{at}.timeout"),
                "must be more than 0",
            ));
        }
        let is_group = s.kind == "group";
        if !is_group && (!s.steps.is_empty() || s.mode.is_some()) {
            errs.push(FieldError::new(
                format!("{at}.steps"),
                "only a step of type group has steps and a mode",
            ));
        }
        match s.kind.as_str() {
            "group" => {
                if s.steps.is_empty() {
                    errs.push(FieldError::new(
                        format!("{at}.steps"),
                        "a group needs at least one step",
                    ));
                }
                if !s.properties.is_null() {
                    errs.push(FieldError::new(
                        format!("{at}.properties"),
                        "a group has no properties",
                    ));
                }
                validate_level(
                    &s.steps,
                    &format!("{at}.steps"),
                    spec,
                    names,
                    deployed,
                    errs,
                );
            }
            "approval" => {
                if !s.properties.is_null() {
                    errs.push(FieldError::new(
                        format!("{at}.properties"),
                        "an approval step has no properties",
                    ));
                }
            }
            "deploy" => {
                match crate::traits::read_properties::<DeployProperties>(
                    &s.properties,
                    &format!("{at}.properties"),
                ) {
                    Err(e) => errs.push(e),
                    Ok(p) => {
                        if p.workloads.is_empty() {
                            errs.push(FieldError::new(
                                format!("{at}.properties.workloads"),
                                "must name at least one workload",
                            ));
                        }
                        for (j, w) in p.workloads.iter().enumerate() {
                            let wp = format!("{at}.properties.workloads[{j}]");
                            if spec.workloads.iter().all(|x| &x.name != w) {
                                errs.push(FieldError::new(
                                    wp,
                                    format!("no workload {w:?} in this application"),
                                ));
                            } else if let Some(other) = deployed.insert(w.clone(), s.name.clone()) {
                                errs.push(FieldError::new(
                                    wp,
                                    format!("workload {w:?} is already deployed by step {other:?}"),
                                ));
                            }
                        }
                    }
                }
            }
            kind => match crate::jobs::get(kind) {
                Some(t) => errs.extend(crate::jobs::validate_step(
                    t.as_ref(),
                    &s.properties,
                    s.timeout,
                    &at,
                )),
                None => {
                    let mut known: Vec<&str> = crate::jobs::BUILT_IN_STEPS.to_vec();
                    known.extend(crate::jobs::names());
                    errs.push(FieldError::new(
                        format!("{at}.type"),
                        format!("unknown step type {kind:?}; known: {}", known.join(", ")),
                    ));
                }
            },
        }
    }
    if let Some(cycle) = cycle_of(steps) {
        errs.push(FieldError::new(
            path.to_string(),
            format!("dependsOn forms a cycle: {}", cycle.join(" -> ")),
        ));
    }
}

/// A dependency cycle among `steps`, if any.
fn cycle_of(steps: &[Step]) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, &[String]> = steps
        .iter()
        .map(|s| (s.name.as_str(), s.depends_on.as_slice()))
        .collect();
    fn visit<'a>(
        n: &'a str,
        deps: &BTreeMap<&'a str, &'a [String]>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| *s == n) {
            let mut c: Vec<String> = stack[i..].iter().map(|s| s.to_string()).collect();
            c.push(n.to_string());
            return Some(c);
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for d in deps.get(n).copied().unwrap_or_default() {
            if let Some(c) = visit(d, deps, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for s in steps {
        if let Some(c) = visit(&s.name, &deps, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}
