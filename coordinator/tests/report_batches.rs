//! A node's batch of reports (`ReportWorkloads`, every touched application
//! planned once) ends where the same reports one command each end: the same
//! phases, instance states, restarts and desired work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::model::failure::Failure;
use daros_coordinator::*;

fn cluster(c: &mut Coordinator) -> Vec<(InstanceId, u64)> {
    let yaml = format!(
        "{}{}{}{}",
        node_yaml("n1", "8", "16Gi", "", ""),
        tenant_yaml("team", ""),
        app_yaml(
            "team",
            "web",
            10,
            &[("api", "500m", 3, &[]), ("ui", "250m", 2, &[])]
        ),
        app_yaml("team", "jobs", 10, &[("worker", "500m", 4, &[])]),
    );
    started_placements(&apply(c, &yaml, 1))
}

fn failed() -> ObservedState {
    ObservedState::Failed {
        failure: Failure::Application {
            check: None,
            detail: "exit 1".into(),
        },
    }
}

#[test]
fn a_batch_of_reports_ends_where_the_reports_one_by_one_end() {
    let (mut one, mut batch) = (Coordinator::new(), Coordinator::new());
    let placed = cluster(&mut one);
    assert_eq!(cluster(&mut batch), placed);
    assert_eq!(placed.len(), 9);
    // Every instance Running except the last, which fails.
    let states: Vec<ObservedState> = (0..placed.len())
        .map(|i| {
            if i + 1 == placed.len() {
                failed()
            } else {
                ObservedState::Running
            }
        })
        .collect();
    let mut restarts_one = Vec::new();
    for (p, s) in placed.iter().zip(&states) {
        restarts_one.extend(started(&report_placement(&mut one, p, s.clone(), 2)));
    }
    let mut reports: Vec<WorkloadReport> = placed
        .iter()
        .zip(&states)
        .map(|((instance, placement), state)| WorkloadReport {
            instance: instance.clone(),
            placement: *placement,
            state: state.clone(),
        })
        .collect();
    // A report about an application that does not exist is ignored, not fatal.
    reports.push(WorkloadReport {
        instance: InstanceId {
            app: key("team", "gone"),
            ..placed[0].0.clone()
        },
        placement: 1,
        state: ObservedState::Running,
    });
    let out = batch
        .apply(Command::ReportWorkloads { reports }, t(2))
        .unwrap();
    assert!(
        out.notes.iter().any(|n| n.contains("no such application")),
        "{:?}",
        out.notes
    );
    // The failed instance restarts in both, once.
    assert_eq!(started(&out), restarts_one);
    assert_eq!(restarts_one.len(), 1, "{restarts_one:?}");
    assert_eq!(batch.list_apps(t(3)), one.list_apps(t(3)));
    assert_eq!(batch.desired_work(), one.desired_work());
    for (i, p) in &placed {
        assert_eq!(batch.instance_status(i, *p), one.instance_status(i, *p));
    }
    // `web` is all Running: its phase says so in both.
    let web = batch.describe(&key("team", "web"), t(3)).unwrap();
    assert_eq!(web.phase, lifecycle::Phase::Running, "{web:?}");
}
