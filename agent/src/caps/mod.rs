//! Host capability probe: cgroup mode and controllers, PSI, eBPF and BTF, bpffs,
//! GPU and kernel. Served by `/v1/capabilities` and `darosctl caps`; on hybrid
//! hosts it states exactly which cgroup features exist where.

pub mod bpf;

use std::path::Path;

use crate::cgroup::{CgroupLayout, CgroupMode};
use crate::model::caps::{BpfCaps, Capabilities, CgroupCaps, ControllerCap, Feature, KernelInfo};

/// Controllers the agent uses, with what for.
const USES: &[(&str, &str)] = &[
    ("cpu", "CPU weight/quota and throttling counters"),
    ("cpuacct", "CPU usage (v1)"),
    ("cpuset", "CPU and memory-node pinning"),
    ("memory", "memory usage, protection and limits"),
    ("blkio", "IO counters and throttling (v1)"),
    ("io", "IO counters, weight and limits (v2)"),
    ("pids", "task counts and limits"),
];

/// Probes the host. `gpu` comes from the GPU collector (NVML init result).
pub fn probe(layout: &CgroupLayout, gpu: Feature) -> Capabilities {
    let uname = rustix::system::uname();
    let kernel = KernelInfo {
        release: uname.release().to_string_lossy().into_owned(),
        version: uname.version().to_string_lossy().into_owned(),
        machine: uname.machine().to_string_lossy().into_owned(),
    };
    let proc_cgroups = std::fs::read_to_string("/proc/cgroups").unwrap_or_default();
    let mountinfo = std::fs::read_to_string(crate::cgroup::layout::MOUNTINFO).unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cgroup = cgroup_caps(layout, &proc_cgroups);
    let psi = node_psi(Path::new("/proc/pressure"));
    let bpf = BpfCaps {
        syscall: bpf::syscall(),
        cgroup_skb: bpf::cgroup_skb(),
        btf: bpf::btf(),
        bpffs: bpf::bpffs(&mountinfo),
        jit: bpf::jit(),
        kprobes: bpf::kprobes(),
        capabilities: bpf::held_capabilities(&status),
    };
    let summary = summary(&kernel, &cgroup, &psi, &bpf, &gpu);
    Capabilities {
        kernel,
        cgroup,
        psi,
        bpf,
        gpu,
        datapath: Default::default(),
        io_cost: Default::default(),
        memory_lock: Feature::unreported(),
        summary,
    }
}

fn node_psi(dir: &Path) -> Feature {
    let missing: Vec<&str> = ["cpu", "memory", "io"]
        .into_iter()
        .filter(|r| std::fs::read(dir.join(r)).is_err())
        .collect();
    if missing.is_empty() {
        Feature::yes(format!("{}/{{cpu,memory,io}}", dir.display()))
    } else {
        Feature::no(format!(
            "{}/{} unreadable (kernel without CONFIG_PSI or booted with psi=0)",
            dir.display(),
            missing.join(",")
        ))
    }
}

/// Parses `/proc/cgroups` into `(name, hierarchy id, enabled)`.
fn kernel_controllers(text: &str) -> Vec<(String, u32, bool)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let hier = f.next()?.parse().ok()?;
            let _num = f.next()?;
            let enabled = f.next()? == "1";
            Some((name, hier, enabled))
        })
        .collect()
}

/// Builds the cgroup part from the layout and `/proc/cgroups`.
pub fn cgroup_caps(layout: &CgroupLayout, proc_cgroups: &str) -> CgroupCaps {
    let v2_root = layout.v2.as_deref();
    let read_list = |file: &str| -> Vec<String> {
        v2_root
            .and_then(|r| std::fs::read_to_string(r.join(file)).ok())
            .map(|t| t.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let v2_controllers = read_list("cgroup.controllers");
    let v2_subtree = read_list("cgroup.subtree_control");
    let mut controllers = Vec::new();
    let mut names: Vec<(String, u32, bool)> = kernel_controllers(proc_cgroups);
    // The v2 io controller shares its kernel subsystem with v1 blkio.
    if v2_controllers.iter().any(|c| c == "io") && !names.iter().any(|(n, _, _)| n == "io") {
        names.push(("io".into(), 0, true));
    }
    for (name, hier, enabled) in names {
        let used_for = USES.iter().find(|(n, _)| *n == name).map(|(_, u)| *u);
        let with_use = |d: String| match used_for {
            Some(u) => format!("{d}; used for {u}"),
            None => d,
        };
        let cap = if !enabled {
            ControllerCap {
                name: name.clone(),
                hierarchy: "none".into(),
                path: None,
                usable: false,
                detail: "disabled on the kernel command line (cgroup_disable=)".into(),
            }
        } else if let Some(p) = layout.v1_path(&name).filter(|_| hier != 0) {
            ControllerCap {
                name: name.clone(),
                hierarchy: "v1".into(),
                path: Some(p.display().to_string()),
                usable: true,
                detail: with_use(format!("v1 hierarchy at {}", p.display())),
            }
        } else if v2_controllers.contains(&name) {
            let root = v2_root.map(|p| p.display().to_string()).unwrap_or_default();
            let delegated = layout.mode == CgroupMode::V2 && !v2_subtree.contains(&name);
            ControllerCap {
                name: name.clone(),
                hierarchy: "v2".into(),
                path: Some(root.clone()),
                usable: true,
                detail: with_use(if delegated {
                    format!("v2 at {root}; not yet enabled in {root}/cgroup.subtree_control")
                } else {
                    format!("v2 at {root}")
                }),
            }
        } else {
            let detail = if hier != 0 {
                format!("bound to v1 hierarchy {hier}, which is not mounted")
            } else if layout.v2.is_some() {
                "not offered in the cgroup2 mount and not mounted as v1".to_string()
            } else {
                "not mounted in any hierarchy".to_string()
            };
            ControllerCap {
                name: name.clone(),
                hierarchy: "none".into(),
                path: None,
                usable: false,
                detail,
            }
        };
        controllers.push(cap);
    }

    let per_cgroup_psi = match (layout.mode, v2_root) {
        (CgroupMode::V1, _) | (_, None) => {
            Feature::no("cgroup v1 has no per-cgroup pressure files and there is no cgroup2 mount")
        }
        (mode, Some(root)) => {
            if root.join("cpu.pressure").exists() {
                if mode == CgroupMode::Hybrid {
                    Feature::yes(format!(
                        "only for cgroups that also exist under {} (the agent creates its managed cgroups there)",
                        root.display()
                    ))
                } else {
                    Feature::yes(format!("*.pressure files under {}", root.display()))
                }
            } else {
                Feature::no(format!(
                    "no cpu.pressure in {} (CONFIG_PSI off or psi=0)",
                    root.display()
                ))
            }
        }
    };
    let bpf_attach = match v2_root {
        Some(root) => Feature::yes(format!(
            "attach cgroup programs to directories under {}",
            root.display()
        )),
        None => Feature::no("cgroup BPF programs need a cgroup2 mount; none exists"),
    };
    CgroupCaps {
        mode: layout.mode,
        v2_mount: v2_root.map(|p| p.display().to_string()),
        v2_controllers,
        controllers,
        per_cgroup_psi,
        bpf_attach,
        managed_root: None,
    }
}

fn line(name: &str, f: &Feature) -> String {
    format!(
        "{} {name}: {}",
        if f.available {
            "available:  "
        } else {
            "UNAVAILABLE:"
        },
        f.detail
    )
}

fn summary(
    kernel: &KernelInfo,
    cg: &CgroupCaps,
    psi: &Feature,
    bpf: &BpfCaps,
    gpu: &Feature,
) -> Vec<String> {
    let mut out = vec![format!("kernel {} ({})", kernel.release, kernel.machine)];
    let v1: Vec<&str> = cg
        .controllers
        .iter()
        .filter(|c| c.hierarchy == "v1")
        .map(|c| c.name.as_str())
        .collect();
    let v2: Vec<&str> = cg
        .controllers
        .iter()
        .filter(|c| c.hierarchy == "v2")
        .map(|c| c.name.as_str())
        .collect();
    out.push(match cg.mode {
        CgroupMode::V2 => format!(
            "cgroup mode v2: unified tree at {} with controllers [{}]",
            cg.v2_mount.as_deref().unwrap_or("?"),
            v2.join(" ")
        ),
        CgroupMode::Hybrid => format!(
            "cgroup mode hybrid: v1 controllers [{}]; cgroup2 mount {} with controllers [{}]",
            v1.join(" "),
            cg.v2_mount.as_deref().unwrap_or("?"),
            v2.join(" ")
        ),
        CgroupMode::V1 => format!(
            "cgroup mode v1: controllers [{}]; no cgroup2 mount",
            v1.join(" ")
        ),
    });
    for c in &cg.controllers {
        if USES.iter().any(|(n, _)| *n == c.name) {
            out.push(line(
                &format!("cgroup controller {}", c.name),
                &Feature {
                    available: c.usable,
                    detail: c.detail.clone(),
                },
            ));
        }
    }
    if cg.mode == CgroupMode::Hybrid {
        let missing: Vec<&str> = ["cpu", "memory", "io", "pids"]
            .into_iter()
            .filter(|n| !v2.contains(n))
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "UNAVAILABLE: cgroup v2 resource controllers [{}] (memory.min/low/high, cpu.weight/max, io.max): bound to v1 hierarchies; the v1 files are used instead",
                missing.join(" ")
            ));
        }
    }
    out.push(line("per-cgroup PSI", &cg.per_cgroup_psi));
    out.push(line("cgroup BPF attach", &cg.bpf_attach));
    out.push(line("node PSI", psi));
    out.push(line("bpf(2)", &bpf.syscall));
    out.push(line("cgroup_skb programs", &bpf.cgroup_skb));
    out.push(line("BTF", &bpf.btf));
    out.push(line("bpffs", &bpf.bpffs));
    out.push(line("BPF JIT", &bpf.jit));
    out.push(line("kprobes", &bpf.kprobes));
    out.push(format!(
        "capabilities held: [{}]",
        bpf.capabilities.join(" ")
    ));
    out.push(line("GPU", gpu));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_PROC_CGROUPS: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t1\t1
cpu\t1\t1\t1
cpuacct\t2\t1\t1
blkio\t7\t1\t1
memory\t4\t29\t1
devices\t5\t1\t1
freezer\t6\t1\t1
net_cls\t0\t1\t1
perf_event\t0\t1\t1
net_prio\t0\t1\t1
hugetlb\t0\t1\t1
pids\t8\t1\t1
";

    #[test]
    fn hybrid_controllers_are_placed_exactly() {
        let layout = CgroupLayout::from_mountinfo(
            "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
             35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             41 31 0:38 / /nonexistent/unified rw - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        let c = cgroup_caps(&layout, HYBRID_PROC_CGROUPS);
        assert_eq!(c.mode, CgroupMode::Hybrid);
        let get = |n: &str| c.controllers.iter().find(|x| x.name == n).unwrap().clone();
        assert_eq!(get("cpu").hierarchy, "v1");
        assert!(get("cpu").usable);
        assert_eq!(get("memory").path.as_deref(), Some("/sys/fs/cgroup/memory"));
        // cpuset is bound to hierarchy 3, which this layout does not mount.
        let cpuset = get("cpuset");
        assert!(!cpuset.usable);
        assert!(cpuset.detail.contains("not mounted"), "{}", cpuset.detail);
        assert!(!get("hugetlb").usable);
        assert!(!c.per_cgroup_psi.available);
    }

    #[test]
    fn this_host_probe_states_mode_and_gaps() {
        let layout = CgroupLayout::detect().unwrap();
        let caps = probe(&layout, Feature::no("no GPU: test"));
        assert_eq!(caps.cgroup.mode, layout.mode);
        assert!(
            caps.summary
                .iter()
                .any(|l| l.starts_with(&format!("cgroup mode {}", layout.mode)))
        );
        assert!(
            caps.summary
                .iter()
                .any(|l| l.contains("GPU") && l.contains("no GPU"))
        );
        if layout.mode == CgroupMode::Hybrid {
            assert!(
                caps.summary
                    .iter()
                    .any(|l| l.contains("cgroup v2 resource controllers")),
                "{:#?}",
                caps.summary
            );
        }
    }
}
