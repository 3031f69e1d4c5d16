//! `daros-bpf run`: owns the datapath until SIGTERM/SIGINT. Leaves everything pinned on exit:
//! the programs keep counting and capping; the next `run` reopens the pins.

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use daros_ebpf::{
    CgroupId, CgroupRoot, FloorRunner, FloorWorkload, NetDatapath, NetFloorController, NetOptions,
    PinDir, SchedDatapath, SchedOptions,
};
use serde_json::json;

use crate::config::{Config, resolve};

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Override the configuration's pin directory.
    #[arg(long)]
    pin_dir: Option<PathBuf>,
    /// Write a JSON status here once the datapath is configured (written atomically).
    #[arg(long)]
    status_file: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut cfg = Config::load(&args.config)?;
    if let Some(p) = args.pin_dir {
        cfg.pin_dir = p;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(cfg, args.status_file))
}

async fn serve(cfg: Config, status_file: Option<PathBuf>) -> anyhow::Result<()> {
    let root = match &cfg.cgroup_root {
        Some(p) => CgroupRoot::at(p)?,
        None => CgroupRoot::detect()?,
    };
    let pins = PinDir::new(&cfg.pin_dir);
    let mut net = NetDatapath::open(&NetOptions {
        pins: pins.clone(),
        max_slots: cfg.max_slots,
    })?;
    let sched = if cfg.sched {
        Some(SchedDatapath::open(&SchedOptions { pins: pins.clone() })?)
    } else {
        None
    };

    let mut attached = Vec::new();
    for a in &cfg.attach {
        let path = resolve(root.path(), a);
        attached.push(
            net.attach(&path)
                .with_context(|| format!("attach {}", path.display()))?,
        );
    }

    let mut floor_workloads = Vec::new();
    let mut wanted = BTreeSet::new();
    for w in &cfg.workload {
        let path = resolve(root.path(), &w.cgroup);
        let id =
            CgroupId::of_path(&path).with_context(|| format!("workload {}", path.display()))?;
        net.set_workload(id, &w.limits())
            .with_context(|| format!("workload {}", path.display()))?;
        for m in &w.members {
            let mpath = resolve(root.path(), m);
            let mid =
                CgroupId::of_path(&mpath).with_context(|| format!("member {}", mpath.display()))?;
            net.add_member(id, mid)
                .with_context(|| format!("member {}", mpath.display()))?;
        }
        wanted.insert(id);
        if let Some(class) = w.class {
            floor_workloads.push(FloorWorkload {
                cgroup: id,
                class,
                egress_floor_bps: w.egress_floor_bps,
                ingress_floor_bps: w.ingress_floor_bps,
            });
        }
    }
    for w in net.reader().workloads()? {
        if !wanted.contains(&w.cgroup) {
            net.remove_workload(w.cgroup)?;
        }
    }

    let events = net.take_events()?;
    if events.lost_before_open() > 0 {
        tracing::warn!(
            lost = events.lost_before_open(),
            "events were lost while no reader ran"
        );
    }
    let event_task = tokio::spawn(events.run(None));

    let net = Arc::new(Mutex::new(net));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runner_task = match &cfg.floor {
        Some(f) => {
            let mut ctl = NetFloorController::new(f.config())?;
            ctl.set_workloads(floor_workloads)?;
            let runner = FloorRunner::new(ctl);
            Some(tokio::spawn(runner.run(
                Arc::clone(&net),
                Duration::from_millis(f.period_ms),
                stop_rx,
            )))
        }
        None => None,
    };

    if let Some(path) = &status_file {
        let guard = net
            .lock()
            .map_err(|_| anyhow::anyhow!("datapath lock poisoned"))?;
        let status = json!({
            "pid": std::process::id(),
            "net": guard.outcome(),
            "sched": sched.as_ref().map(|s| s.outcome().clone()),
            "attached": attached,
            "workloads": guard.reader().workloads()?,
        });
        drop(guard);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&status)?)?;
        std::fs::rename(&tmp, path)?;
    }
    tracing::info!(pins = %pins.path().display(), "datapath configured; running until SIGTERM/SIGINT");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        r = event_task => { r??; }
    }
    let _ = stop_tx.send(true);
    if let Some(t) = runner_task {
        let runner = t.await?;
        tracing::info!(stats = ?runner.stats(), "floor loop stopped");
    }
    tracing::info!("stopped; programs and maps stay pinned (daros-bpf cleanup removes them)");
    Ok(())
}
