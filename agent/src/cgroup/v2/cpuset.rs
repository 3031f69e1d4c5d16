//! cgroup v2 `cpuset` controller files and the cpu-list format they use.

use std::collections::BTreeSet;

/// CPUs the cgroup may run on (`0-3,6`); empty means "the parent's".
pub const CPUS: &str = "cpuset.cpus";
/// CPUs the cgroup actually gets.
pub const CPUS_EFFECTIVE: &str = "cpuset.cpus.effective";
/// `member`, `root` or `isolated` (Linux 5.11+); a partition root owns its CPUs exclusively.
pub const CPUS_PARTITION: &str = "cpuset.cpus.partition";
/// Memory nodes.
pub const MEMS: &str = "cpuset.mems";

/// Parses a cpu list such as `0-3,6` (empty text is an empty set).
pub fn parse_list(text: &str) -> Option<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.trim().parse().ok()?);
            }
        }
    }
    Some(out)
}

/// Formats a set as the kernel prints it (`0-3,6`).
pub fn format_list(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// True when a `cpuset.cpus.partition` value says the cgroup is a valid partition root.
pub fn is_partition_root(text: &str) -> bool {
    let t = text.trim();
    t == "root" || t == "isolated"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip() {
        let s = parse_list("0-3,6,8-9\n").unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(format_list(&s), "0-3,6,8-9");
        assert!(parse_list("").unwrap().is_empty());
        assert!(parse_list("3-1").is_none());
        assert!(parse_list("a").is_none());
        assert!(
            is_partition_root("root\n")
                && !is_partition_root("root invalid (Parent is not a partition root)")
        );
    }
}
