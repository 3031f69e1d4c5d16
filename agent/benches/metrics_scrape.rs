//! The cost of the control-plane metrics (issue 16) with `DAROS_BENCH_APPS`
//! (default 1,000) applications of two workloads each over 20 tenants and 50
//! nodes, every one declaring an availability SLA (the worst case: two series
//! per application): the coordinator's view (`Coordinator::metrics`, what the leader's
//! refresh task computes every second) and a scrape's encoding of it
//! (`ControlCollector` through the agent's registry), median of 50 each, with
//! the page size. The agent's CPU for the refresh is the view's time per
//! second.
//!
//! `cargo bench -p daros-agent --bench metrics_scrape` (release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use daros_agent::control::metrics::{ControlCollector, ControlMetrics};
use daros_coordinator::{Command, Coordinator, Format, Timestamp};

fn docs(yaml: &str) -> Vec<daros_coordinator::spec::Document> {
    daros_coordinator::spec::parse(yaml, Format::Yaml).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let apps: u32 = std::env::var("DAROS_BENCH_APPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let mut c = Coordinator::new();
    for n in 0..50 {
        let yaml = format!(
            "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: n{n}}}\nspec:\n  \
             capacity: {{cpu: \"64\", memory: 256Gi}}\n  runtimes: [process]\n"
        );
        for d in docs(&yaml) {
            if let daros_coordinator::spec::Document::Node(node) = d {
                c.apply(Command::RegisterNode { node }, Timestamp(0))
                    .unwrap();
            }
        }
    }
    let mut yaml = String::new();
    for t in 0..20 {
        yaml.push_str(&format!(
            "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: t{t}}}\nspec: {{quota: {{cpu: \"1000\"}}}}\n---\n"
        ));
    }
    for i in 0..apps {
        yaml.push_str(&format!(
            "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: a{i}, tenant: t{}}}\nspec:\n  \
             sla: {{availability: \"99.9%\"}}\n  workloads:\n    - {{name: web, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}}}}}\n    \
             - {{name: db, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}}}}}\n---\n",
            i % 20
        ));
    }
    let t0 = Instant::now();
    c.apply(
        Command::Apply {
            documents: docs(&yaml),
            start: true,
        },
        Timestamp(1),
    )
    .unwrap();
    eprintln!("{apps} applications applied in {:.2?}", t0.elapsed());

    let mut view_s = Vec::new();
    let mut view = c.metrics(Timestamp(2));
    for _ in 0..50 {
        let t = Instant::now();
        view = c.metrics(Timestamp(2));
        view_s.push(t.elapsed().as_secs_f64());
    }
    let placed: u64 = view.instances.values().sum();
    let by_phase: std::collections::BTreeMap<String, u64> =
        view.applications
            .iter()
            .fold(Default::default(), |mut m, ((_, p), n)| {
                *m.entry(p.clone()).or_default() += n;
                m
            });
    eprintln!("phases {by_phase:?}, {placed} instances placed");
    assert_eq!(by_phase.values().sum::<u64>(), u64::from(apps));
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register_collector(Box::new(ControlCollector(ControlMetrics::fixed(view))));
    let mut enc_s = Vec::new();
    let mut size = 0;
    for _ in 0..50 {
        let t = Instant::now();
        let page = daros_agent::metrics::render(&reg).unwrap();
        enc_s.push(t.elapsed().as_secs_f64());
        size = page.len();
    }
    let (v, e) = (median(view_s), median(enc_s));
    println!(
        "apps {apps}: view {:.3} ms, encode {:.3} ms, page {} KiB; refresh CPU {:.2}% of a core",
        v * 1e3,
        e * 1e3,
        size / 1024,
        v * 100.0
    );
}
