//! Carries out knob plans on a real cgroup through the cgroup layer: every value
//! is written in one `write(2)`, read back and compared the way the kernel
//! normalises it; a refusal or a different read-back is a degradation carrying
//! the kernel's answer. Also records a discovered cgroup's original values and
//! restores them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::knob::{Home, Knob, KnobPlan, KnobReport, PlanAction};
use super::store::Original;
use crate::cgroup::v2::cpuset;
use crate::cgroup::v2::io::{IoMaxLine, parse_default_weight, parse_max};
use crate::cgroup::{AnyBackend, CgroupPath, fs, v1};

/// The file of `knob` for `cg`, if the backend has its hierarchy.
pub fn knob_path(backend: &AnyBackend, cg: &CgroupPath, knob: Knob) -> Option<PathBuf> {
    match (knob.home(), backend) {
        (Home::V2, AnyBackend::V2(b)) => Some(b.dir(cg).join(knob.name())),
        (Home::V1(c), AnyBackend::V1(b)) => Some(cg.under(b.mount(c)?).join(knob.name())),
        (Home::V1("pids"), AnyBackend::V2(b)) => Some(b.dir(cg).join(knob.name())),
        _ => None,
    }
}

/// Writes `values` to `path`, one `write(2)` each (an empty value is written as
/// a newline, which the kernel reads as "empty").
pub fn write_values(path: &Path, values: &[String]) -> Result<(), String> {
    for v in values {
        let data = if v.is_empty() { "\n" } else { v.as_str() };
        fs::write(path, data).map_err(|e| format!("the kernel refused it: {e}"))?;
    }
    Ok(())
}

fn num(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// Byte values compare within a page (the kernel rounds down to pages); v1's
/// `-1` reads back as a huge number.
fn bytes_match(written: &str, read: &str, page: u64) -> bool {
    let (w, r) = (written.trim(), read.trim());
    match (w, r) {
        ("max", "max") => true,
        ("-1", r) => num(r).is_some_and(|r| r >= v1::memory::UNLIMITED_THRESHOLD),
        (w, r) => match (num(w), num(r)) {
            (Some(w), Some(r)) => w >= r && w - r < page.max(1),
            _ => false,
        },
    }
}

/// True when the kernel's read-back of `knob` shows `values` in effect.
pub fn read_back_matches(knob: Knob, values: &[String], read: &str, page: u64) -> bool {
    match knob {
        Knob::MemoryMin
        | Knob::MemoryLow
        | Knob::MemoryHigh
        | Knob::MemoryMax
        | Knob::MemorySoftLimit
        | Knob::MemoryLimit => values.iter().all(|v| bytes_match(v, read, page)),
        Knob::CpuMax => values.iter().all(|v| {
            crate::cgroup::v2::cpu::parse_max(v) == crate::cgroup::v2::cpu::parse_max(read)
        }),
        Knob::IoWeight | Knob::IoBfqWeight => values.iter().all(|v| {
            parse_default_weight(v).is_some()
                && parse_default_weight(v) == parse_default_weight(read)
        }),
        Knob::IoMax => {
            let have = parse_max(read);
            values.iter().all(|v| {
                let Some(want) = parse_max(v).into_iter().next() else {
                    return false;
                };
                let got = have
                    .iter()
                    .find(|l| (l.major, l.minor) == (want.major, want.minor))
                    .copied()
                    .unwrap_or(IoMaxLine::unlimited(want.major, want.minor));
                got == want
            })
        }
        Knob::BlkioReadBps | Knob::BlkioWriteBps => {
            let have = v1::blkio::parse_device_limits(read);
            values.iter().all(|v| {
                let Some(&(ma, mi, want)) = v1::blkio::parse_device_limits(v).first() else {
                    return false;
                };
                let got = have
                    .iter()
                    .find(|(a, b, _)| (*a, *b) == (ma, mi))
                    .map_or(0, |x| x.2);
                got == want
            })
        }
        Knob::CpusetCpus | Knob::V1CpusetCpus => values.iter().all(|v| {
            let w = cpuset::parse_list(v);
            w.is_some() && w == cpuset::parse_list(read)
        }),
        _ => values.iter().all(|v| v.trim() == read.trim()),
    }
}

/// What to show as applied: the device lines of per-device files, the default
/// weight line, or the trimmed content.
fn applied_text(knob: Knob, values: &[String], read: &str) -> String {
    match knob {
        Knob::IoMax => {
            let have = parse_max(read);
            values
                .iter()
                .filter_map(|v| parse_max(v).into_iter().next())
                .map(|want| {
                    have.iter()
                        .find(|l| (l.major, l.minor) == (want.major, want.minor))
                        .copied()
                        .unwrap_or(IoMaxLine::unlimited(want.major, want.minor))
                        .render()
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        Knob::BlkioReadBps | Knob::BlkioWriteBps => {
            let have = v1::blkio::parse_device_limits(read);
            values
                .iter()
                .filter_map(|v| v1::blkio::parse_device_limits(v).first().copied())
                .map(|(ma, mi, _)| {
                    let got = have
                        .iter()
                        .find(|(a, b, _)| (*a, *b) == (ma, mi))
                        .map_or(0, |x| x.2);
                    format!("{ma}:{mi} {got}")
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        Knob::IoWeight | Knob::IoBfqWeight => parse_default_weight(read)
            .map_or_else(|| read.trim().to_string(), |w| format!("default {w}")),
        _ => read.trim().to_string(),
    }
}

/// Records the current content of every file `plans` will write that has no
/// original yet (discovered cgroups only).
pub fn capture_originals(
    backend: &AnyBackend,
    cg: &CgroupPath,
    plans: &[KnobPlan],
    originals: &mut Vec<Original>,
) {
    for p in plans {
        if p.values().is_empty() {
            continue;
        }
        let Some(path) = knob_path(backend, cg, p.knob) else {
            continue;
        };
        if originals.iter().any(|o| o.path == path) {
            continue;
        }
        if let Ok(content) = fs::read_string(&path) {
            originals.push(Original { path, content });
        }
    }
}

/// Applies `plans` to `cg` and reports every knob.
pub fn apply(
    backend: &AnyBackend,
    cg: &CgroupPath,
    plans: &[KnobPlan],
    page: u64,
) -> Vec<KnobReport> {
    plans
        .iter()
        .map(|p| apply_one(backend, cg, p, page))
        .collect()
}

fn apply_one(backend: &AnyBackend, cg: &CgroupPath, p: &KnobPlan, page: u64) -> KnobReport {
    let (values, inert) = match &p.action {
        PlanAction::Degraded(reason) => return KnobReport::degraded(p, None, reason.clone()),
        PlanAction::Mechanism {
            enforced: true,
            how,
        } => {
            let by = if matches!(p.knob, Knob::NetworkEgress | Knob::NetworkIngress) {
                "eBPF datapath"
            } else {
                "protection loop"
            };
            let mut r = KnobReport::enforced(p, by);
            r.note = Some(how.clone());
            return r;
        }
        PlanAction::Mechanism {
            enforced: false,
            how,
        } => return KnobReport::degraded(p, None, how.clone()),
        PlanAction::Write(v) => (v, None),
        PlanAction::WriteInert { values, reason } => (values, Some(reason)),
    };
    let Some(path) = knob_path(backend, cg, p.knob) else {
        return KnobReport::degraded(p, None, format!("{} has no hierarchy on this host", p.knob));
    };
    if let Err(reason) = write_values(&path, values) {
        let current = fs::read_string(&path)
            .ok()
            .map(|c| applied_text(p.knob, values, &c));
        return KnobReport::degraded(p, current, reason);
    }
    let read = match fs::read_string(&path) {
        Ok(r) => r,
        Err(e) => {
            return KnobReport::degraded(
                p,
                None,
                format!("written, but reading it back failed: {e}"),
            );
        }
    };
    let applied = applied_text(p.knob, values, &read);
    if !read_back_matches(p.knob, values, &read, page) {
        return KnobReport::degraded(
            p,
            Some(applied.clone()),
            format!(
                "wrote {:?}, the kernel reads back {:?}",
                values.join("; "),
                applied
            ),
        );
    }
    match inert {
        Some(reason) => KnobReport::degraded(p, Some(applied), reason.clone()),
        None => KnobReport::enforced(p, applied),
    }
}

/// Values that put `knob` back to what a new cgroup has.
pub fn default_values(
    knob: Knob,
    disks: &[(u32, u32)],
    parent_cpus: &BTreeSet<u32>,
) -> Option<Vec<String>> {
    let one = |s: &str| Some(vec![s.to_string()]);
    match knob {
        Knob::CpuWeight => one("100"),
        Knob::CpuMax => one("max 100000"),
        Knob::CpusetCpus => one(""),
        Knob::CpusetPartition => one("member"),
        Knob::MemoryMin | Knob::MemoryLow => one("0"),
        Knob::MemoryHigh | Knob::MemoryMax | Knob::PidsMax => one("max"),
        Knob::IoWeight | Knob::IoBfqWeight => one("default 100"),
        Knob::IoMax => Some(
            disks
                .iter()
                .map(|(a, b)| IoMaxLine::unlimited(*a, *b).render())
                .collect(),
        ),
        Knob::CpuShares => one("1024"),
        Knob::CpuCfsPeriod => one("100000"),
        Knob::CpuCfsQuota | Knob::MemorySoftLimit | Knob::MemoryLimit => one("-1"),
        Knob::V1CpusetCpus => {
            Some(vec![cpuset::format_list(parent_cpus)]).filter(|_| !parent_cpus.is_empty())
        }
        Knob::V1CpuExclusive => one("0"),
        Knob::BlkioWeight => one("500"),
        Knob::BlkioReadBps | Knob::BlkioWriteBps => {
            Some(disks.iter().map(|(a, b)| format!("{a}:{b} 0")).collect())
        }
        _ => None,
    }
}

/// The writes that put a file back to its recorded `content`.
pub fn restore_values(file: &str, content: &str, disks: &[(u32, u32)]) -> Vec<String> {
    match file {
        "io.max" => {
            let had = parse_max(content);
            disks
                .iter()
                .map(|(a, b)| {
                    had.iter()
                        .find(|l| (l.major, l.minor) == (*a, *b))
                        .copied()
                        .unwrap_or(IoMaxLine::unlimited(*a, *b))
                        .render()
                })
                .collect()
        }
        "blkio.throttle.read_bps_device" | "blkio.throttle.write_bps_device" => {
            let had = v1::blkio::parse_device_limits(content);
            disks
                .iter()
                .map(|(a, b)| {
                    let v = had
                        .iter()
                        .find(|(x, y, _)| (*x, *y) == (*a, *b))
                        .map_or(0, |t| t.2);
                    format!("{a}:{b} {v}")
                })
                .collect()
        }
        "io.weight" | "io.bfq.weight" => parse_default_weight(content)
            .map(|w| vec![format!("default {w}")])
            .unwrap_or_default(),
        "cpuset.cpus.partition" => vec![
            content
                .split_whitespace()
                .next()
                .unwrap_or("member")
                .to_string(),
        ],
        _ => vec![content.trim().to_string()],
    }
}

/// Writes every original back; returns one message per file that refused.
pub fn restore(originals: &[Original], disks: &[(u32, u32)]) -> Vec<String> {
    let mut errors = Vec::new();
    for o in originals {
        let file = o.path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        let values = restore_values(file, &o.content, disks);
        if let Err(e) = write_values(&o.path, &values) {
            errors.push(format!("restoring {}: {e}", o.path.display()));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_string()).collect()
    }

    #[test]
    fn read_back_rules() {
        assert!(read_back_matches(
            Knob::MemoryMin,
            &s(&["536870912"]),
            "536870912\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::MemoryMin,
            &s(&["536870913"]),
            "536870912\n",
            4096
        ));
        assert!(!read_back_matches(
            Knob::MemoryMin,
            &s(&["536870912"]),
            "0\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::MemoryLimit,
            &s(&["-1"]),
            "9223372036854771712\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::MemoryMax,
            &s(&["max"]),
            "max\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::CpuMax,
            &s(&["max 100000"]),
            "max 100000\n",
            4096
        ));
        assert!(!read_back_matches(
            Knob::CpuMax,
            &s(&["150000 100000"]),
            "max 100000\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::IoWeight,
            &s(&["default 1000"]),
            "default 1000\n8:0 50\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::IoMax,
            &s(&[
                "254:0 rbps=1048576 wbps=max riops=max wiops=max",
                "8:0 rbps=max wbps=max riops=max wiops=max"
            ]),
            "254:0 rbps=1048576 wbps=max riops=max wiops=max\n",
            4096
        ));
        assert!(!read_back_matches(
            Knob::IoMax,
            &s(&["254:0 rbps=1 wbps=max riops=max wiops=max"]),
            "",
            4096
        ));
        assert!(read_back_matches(
            Knob::BlkioReadBps,
            &s(&["254:0 0"]),
            "",
            4096
        ));
        assert!(read_back_matches(
            Knob::BlkioReadBps,
            &s(&["254:0 5"]),
            "254:0 5\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::CpusetCpus,
            &s(&["2,3"]),
            "2-3\n",
            4096
        ));
        assert!(read_back_matches(Knob::CpusetCpus, &s(&[""]), "\n", 4096));
        assert!(!read_back_matches(
            Knob::CpusetPartition,
            &s(&["root"]),
            "root invalid (Parent is not a partition root)\n",
            4096
        ));
        assert!(read_back_matches(
            Knob::PidsMax,
            &s(&["max"]),
            "max\n",
            4096
        ));
    }

    #[test]
    fn restore_and_defaults() {
        let d = [(254, 0), (8, 0)];
        assert_eq!(
            restore_values("io.max", "254:0 rbps=5 wbps=max riops=max wiops=max\n", &d),
            s(&[
                "254:0 rbps=5 wbps=max riops=max wiops=max",
                "8:0 rbps=max wbps=max riops=max wiops=max"
            ])
        );
        assert_eq!(
            restore_values("blkio.throttle.read_bps_device", "8:0 7\n", &d),
            s(&["254:0 0", "8:0 7"])
        );
        assert_eq!(
            restore_values("io.weight", "default 100\n", &d),
            s(&["default 100"])
        );
        assert_eq!(restore_values("memory.min", "0\n", &d), s(&["0"]));
        assert_eq!(
            restore_values("cpuset.cpus.partition", "member\n", &d),
            s(&["member"])
        );
        assert_eq!(
            default_values(Knob::CpuMax, &d, &BTreeSet::new()),
            Some(s(&["max 100000"]))
        );
        assert_eq!(
            default_values(Knob::BlkioWriteBps, &d, &BTreeSet::new()),
            Some(s(&["254:0 0", "8:0 0"]))
        );
        assert_eq!(default_values(Knob::CpuFloor, &d, &BTreeSet::new()), None);
    }

    #[test]
    fn apply_writes_reads_back_and_reports_refusals() {
        // A plain directory stands in for the file layer here; the real kernel
        // checks are in tests/qos_*.rs and the VM tests.
        let dir = tempfile::tempdir().unwrap();
        let b = AnyBackend::V2(crate::cgroup::v2::V2Backend::new(dir.path().to_path_buf()));
        let cg = CgroupPath::new("w").unwrap();
        std::fs::create_dir(dir.path().join("w")).unwrap();
        std::fs::write(dir.path().join("w/memory.min"), "2097152\n").unwrap();
        let plans = vec![
            KnobPlan::write(Knob::MemoryMin, "reservation 1Mi", "1048576"),
            KnobPlan::write(Knob::MemoryMax, "limit", "1048576"),
            KnobPlan::degraded(Knob::CpuFloor, "reservation 1", "off"),
        ];
        let mut originals = Vec::new();
        capture_originals(&b, &cg, &plans, &mut originals);
        assert_eq!(originals.len(), 1, "only existing files are recorded");
        assert_eq!(originals[0].content, "2097152\n");
        let r = apply(&b, &cg, &plans, 4096);
        assert_eq!(r[0].status, super::super::knob::KnobStatus::Enforced);
        assert_eq!(r[0].applied.as_deref(), Some("1048576"));
        assert_eq!(r[1].status, super::super::knob::KnobStatus::Degraded);
        assert!(
            r[1].reason.as_deref().unwrap().contains("refused"),
            "{:?}",
            r[1]
        );
        assert_eq!(r[2].reason.as_deref(), Some("off"));
        assert!(restore(&originals, &[]).is_empty());
        // (A regular file is not truncated by the write, as kernfs files are replaced.)
        assert_eq!(
            std::fs::read_to_string(dir.path().join("w/memory.min")).unwrap(),
            "2097152\n"
        );
    }
}
