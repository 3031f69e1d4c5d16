//! The process RuntimeSpecs of `examples/shop.yaml`, as parsed by the
//! coordinator, are accepted by the process adapter: the spec format the
//! coordinator carries opaquely is the one this adapter reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestState, open};
use daros_adapters::adapter::RuntimeAdapter;
use daros_adapters::instance::WorkloadInstanceSpec;
use daros_adapters::placement::Placement;
use daros_coordinator::model::lifecycle_policy::RestartPolicy;
use daros_coordinator::model::time::DurationMs;
use daros_coordinator::spec::{Document, Format, parse};

#[tokio::test]
async fn the_shop_example_creates_every_instance() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/shop.yaml"
    ))
    .unwrap();
    let app = parse(&text, Format::Yaml)
        .unwrap()
        .into_iter()
        .find_map(|d| match d {
            Document::Application(a) => Some(a),
            _ => None,
        })
        .expect("an Application in shop.yaml");
    let state = TestState::new();
    let (adapter, _ev) = open(state.path()).await;
    let mut ids = Vec::new();
    for w in &app.spec.workloads {
        for job in &w.init_jobs {
            let s = WorkloadInstanceSpec::init_job(&app.key(), w, job, Placement::default());
            assert_eq!(s.lifecycle.restart, RestartPolicy::OnFailure);
            assert_eq!(s.deadline, Some(DurationMs::from_secs(30)));
            ids.push(adapter.create(&s).await.unwrap().to_string());
        }
        for r in 0..w.replicas.min {
            let s = WorkloadInstanceSpec::replica(
                &app.key(),
                &app.spec.lifecycle_policy,
                w,
                r,
                Placement::default(),
            );
            ids.push(adapter.create(&s).await.unwrap().to_string());
        }
    }
    assert_eq!(
        ids,
        [
            "process:shop-team.shop.web.init.prepare-docroot",
            "process:shop-team.shop.web.0",
            "process:shop-team.shop.worker.0",
        ]
    );
}
