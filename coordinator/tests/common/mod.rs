//! Helpers shared by the integration tests: build nodes and documents,
//! apply YAML, report runtime states.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use daros_coordinator::reconcile::ActionKind;
use daros_coordinator::*;

pub fn t(ms: u64) -> Timestamp {
    Timestamp(ms)
}

pub fn docs(yaml: &str) -> Vec<Document> {
    daros_coordinator::spec::parse(yaml, Format::Yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// Applies `yaml`. Its `Node` documents stand for agents: each node
/// registers itself (what a node's agent does; a document alone only
/// declares a node, which takes no work until its agent registers).
pub fn apply(c: &mut Coordinator, yaml: &str, now: u64) -> Outcome {
    let (nodes, rest): (Vec<Document>, Vec<Document>) = docs(yaml)
        .into_iter()
        .partition(|d| matches!(d, Document::Node(_)));
    register(c, nodes, now);
    c.apply(
        Command::Apply {
            documents: rest,
            start: true,
        },
        t(now),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Registers every `Node` document of `documents` as its agent would.
pub fn register(c: &mut Coordinator, documents: Vec<Document>, now: u64) {
    for d in documents {
        if let Document::Node(node) = d {
            c.apply(Command::RegisterNode { node }, t(now))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

pub fn node_yaml(name: &str, cpu: &str, mem: &str, labels: &str, domains: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec:\n  capacity: {{cpu: \"{cpu}\", memory: {mem}}}\n  runtimes: [container, process]\n  failureDomains: {{{domains}}}\n---\n"
    )
}

pub fn tenant_yaml(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{{extra}}}\n---\n"
    )
}

/// An application with one process workload per `(name, cpu, replicas, deps)`.
pub fn app_yaml(
    tenant: &str,
    name: &str,
    priority: u32,
    workloads: &[(&str, &str, u32, &[&str])],
) -> String {
    let mut s = format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: {tenant}}}\nspec:\n  priority: {priority}\n  workloads:\n"
    );
    for (w, cpu, replicas, deps) in workloads {
        s.push_str(&format!(
            "    - name: {w}\n      runtime: {{type: process}}\n      resources: {{cpu: {{request: \"{cpu}\"}}, memory: {{request: 64Mi}}}}\n      replicas: {replicas}\n      dependsOn: [{}]\n",
            deps.join(", ")
        ));
    }
    s.push_str("---\n");
    s
}

pub fn key(tenant: &str, name: &str) -> AppKey {
    AppKey::new(tenant, name)
}

/// Instance ids started by the outcome.
pub fn started(out: &Outcome) -> Vec<InstanceId> {
    out.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::Start { instance, .. } => Some(instance.clone()),
            _ => None,
        })
        .collect()
}

/// Instance ids stopped by the outcome.
pub fn stopped(out: &Outcome) -> Vec<InstanceId> {
    out.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::Stop { instance, .. } => Some(instance.clone()),
            _ => None,
        })
        .collect()
}

/// (instance, placement) started by the outcome.
pub fn started_placements(out: &Outcome) -> Vec<(InstanceId, u64)> {
    out.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::Start {
                instance,
                placement,
                ..
            } => Some((instance.clone(), *placement)),
            _ => None,
        })
        .collect()
}

/// (instance, placement) stopped by the outcome.
pub fn stopped_placements(out: &Outcome) -> Vec<(InstanceId, u64)> {
    out.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::Stop {
                instance,
                placement,
            } => Some((instance.clone(), *placement)),
            _ => None,
        })
        .collect()
}

/// A report about one placement of an instance.
pub fn report_placement(
    c: &mut Coordinator,
    (id, placement): &(InstanceId, u64),
    state: ObservedState,
    now: u64,
) -> Outcome {
    c.apply(
        Command::ReportWorkload {
            instance: id.clone(),
            placement: *placement,
            state,
        },
        t(now),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Init jobs run by the outcome.
pub fn jobs(out: &Outcome) -> Vec<InitJobId> {
    out.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::RunInitJob { job, .. } => Some(job.clone()),
            _ => None,
        })
        .collect()
}

pub fn report(c: &mut Coordinator, id: &InstanceId, state: ObservedState, now: u64) -> Outcome {
    c.apply(
        Command::ReportWorkload {
            instance: id.clone(),
            placement: 0,
            state,
        },
        t(now),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn report_job(c: &mut Coordinator, id: &InitJobId, state: ObservedState, now: u64) -> Outcome {
    c.apply(
        Command::ReportInitJob {
            job: id.clone(),
            run: 0,
            state,
        },
        t(now),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn operate(
    c: &mut Coordinator,
    k: &AppKey,
    op: OperationRequest,
    now: u64,
) -> Result<Outcome, CoordinatorError> {
    c.apply(
        Command::Operate {
            app: k.clone(),
            operation: op,
        },
        t(now),
    )
}

pub fn transitions(out: &Outcome) -> Vec<String> {
    out.events
        .iter()
        .map(|e| {
            format!(
                "{}->{}",
                e.from.map_or("*".to_string(), |p| p.to_string()),
                e.to
            )
        })
        .collect()
}

/// The reasons of every decision of `kind`, oldest first.
pub fn reasons_of(c: &Coordinator, kind: daros_coordinator::decision::DecisionKind) -> Vec<String> {
    c.decisions()
        .iter()
        .filter(|d| d.kind == kind)
        .map(|d| d.reason.clone())
        .collect()
}
