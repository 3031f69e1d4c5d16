//! `daros-bpf stats`: what the pinned maps hold, for operators (`-o json` for scripts). Works
//! while `run` is running and while it is not.

use std::{collections::BTreeMap, path::PathBuf};

use daros_ebpf::{CgroupId, CgroupRoot, NetReader, PinDir, SchedReader, bpffs::DEFAULT_PIN_DIR};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Pin directory.
    #[arg(long, default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

/// cgroup id -> path below the v2 mount, for display.
fn cgroup_paths() -> BTreeMap<CgroupId, String> {
    let mut out = BTreeMap::new();
    let Ok(root) = CgroupRoot::detect() else {
        return out;
    };
    let mut stack = vec![root.path().to_owned()];
    while let Some(dir) = stack.pop() {
        if let Ok(id) = CgroupId::of_path(&dir) {
            let rel = dir
                .strip_prefix(root.path())
                .unwrap_or(&dir)
                .display()
                .to_string();
            out.insert(id, format!("/{rel}"));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let pins = PinDir::new(&args.pin_dir);
    let net = NetReader::open(&pins)?;
    let sched = SchedReader::open(&pins).ok();
    let workloads = net.workloads()?;
    let paths = cgroup_paths();
    let sched_of = |id: CgroupId| sched.as_ref().and_then(|s| s.get(id).ok().flatten());
    match args.output {
        Format::Json => {
            let list: Vec<_> = workloads
                .iter()
                .map(|w| json!({"path": paths.get(&w.cgroup), "net": w, "sched": sched_of(w.cgroup)}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"workloads": list, "net_stats": net.stats()?})
                )?
            );
        }
        Format::Table => {
            println!(
                "{:<10} {:<32} {:>14} {:>14} {:>10} {:>12} {:>12} {:>10} {:>10}",
                "CGROUP",
                "PATH",
                "TX BYTES",
                "RX BYTES",
                "TX DROPS",
                "TX CAP B/s",
                "RX CAP B/s",
                "ONCPU ms",
                "RQ p99"
            );
            for w in &workloads {
                let s = sched_of(w.cgroup);
                let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
                println!(
                    "{:<10} {:<32} {:>14} {:>14} {:>10} {:>12} {:>12} {:>10} {:>10}",
                    w.cgroup,
                    paths.get(&w.cgroup).map_or("?", String::as_str),
                    w.counters.egress.bytes,
                    w.counters.ingress.bytes,
                    w.counters.egress.drop_packets,
                    opt(w.egress.effective_bps),
                    opt(w.ingress.effective_bps),
                    s.map_or_else(|| "-".to_owned(), |s| (s.oncpu_ns / 1_000_000).to_string()),
                    s.and_then(|s| s.wait_quantile(0.99))
                        .map_or_else(|| "-".to_owned(), |d| format!("{d:?}")),
                );
            }
            let st = net.stats()?;
            println!(
                "unregistered cgroups: {} packets, {} bytes; events lost: {}",
                st.unknown_packets, st.unknown_bytes, st.events_lost
            );
        }
    }
    Ok(())
}
