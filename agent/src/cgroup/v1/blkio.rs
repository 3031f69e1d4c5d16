//! cgroup v1 `blkio` controller files.
//!
//! Since Linux 6.x the v1 throttle statistics are only counted once blk-throttle
//! is active on the disk (`blk_should_throtl`). Writing a no-op rule
//! (`MAJ:MIN 0` = unlimited) in a cgroup the agent owns activates it; see
//! [`activate_accounting`].

use std::path::Path;

use crate::cgroup::fs::{self, CgroupError};
use crate::cgroup::parse::{parse_dev, parse_u64};
use crate::cgroup::stats::IoStats;

/// Bytes per device and direction, including descendants.
pub const IO_SERVICE_BYTES: &str = "blkio.throttle.io_service_bytes_recursive";
/// Operations per device and direction, including descendants.
pub const IO_SERVICED: &str = "blkio.throttle.io_serviced_recursive";
/// Read bandwidth limit per device.
pub const READ_BPS_DEVICE: &str = "blkio.throttle.read_bps_device";
/// Write bandwidth limit per device.
pub const WRITE_BPS_DEVICE: &str = "blkio.throttle.write_bps_device";
/// Proportional weight (CFQ, removed in Linux 5.0).
pub const WEIGHT: &str = "blkio.weight";
/// Proportional weight of BFQ (1–1000), where BFQ exposes it.
pub const BFQ_WEIGHT: &str = "blkio.bfq.weight";

/// Parses a `blkio.throttle.*_device` file (`MAJ:MIN value` per line) into
/// `(major, minor, value)`.
pub fn parse_device_limits(text: &str) -> Vec<(u32, u32, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            let (ma, mi) = parse_dev(p.next()?.as_bytes())?;
            let v = parse_u64(p.next()?.as_bytes())?;
            Some((ma, mi, v))
        })
        .collect()
}

/// Which counter pair a file fills.
#[derive(Debug, Clone, Copy)]
pub enum Counting {
    /// `blkio.throttle.io_service_bytes*`.
    Bytes,
    /// `blkio.throttle.io_serviced*`.
    Ops,
}

/// Parses `MAJ:MIN Op value` lines into `out` (entries created as needed).
pub fn parse_rwstat(buf: &[u8], what: Counting, out: &mut Vec<IoStats>) {
    for line in buf.split(|&c| c == b'\n') {
        let mut p = line.split(|&c| c == b' ').filter(|s| !s.is_empty());
        let (Some(dev), Some(op), Some(v)) = (p.next(), p.next(), p.next()) else {
            continue;
        };
        let (Some((major, minor)), Some(v)) = (parse_dev(dev), parse_u64(v)) else {
            continue;
        };
        let e = IoStats::entry(out, major, minor);
        match (what, op) {
            (Counting::Bytes, b"Read") => e.rbytes = v,
            (Counting::Bytes, b"Write") => e.wbytes = v,
            (Counting::Bytes, b"Discard") => e.dbytes = v,
            (Counting::Ops, b"Read") => e.rios = v,
            (Counting::Ops, b"Write") => e.wios = v,
            (Counting::Ops, b"Discard") => e.dios = v,
            _ => {}
        }
    }
}

/// Activates per-cgroup IO accounting for `disks` by writing an unlimited
/// write-bandwidth rule into `dir` (a cgroup the agent owns). Returns one note per
/// disk that refused.
pub fn activate_accounting(dir: &Path, disks: &[(u32, u32)]) -> Vec<String> {
    let file = dir.join(WRITE_BPS_DEVICE);
    disks
        .iter()
        .filter_map(|(ma, mi)| {
            fs::write(&file, &format!("{ma}:{mi} 0"))
                .err()
                .map(|e: CgroupError| e.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rwstat() {
        // Captured on the hybrid hosts after a 20 MiB fsync'd and a 20 MiB direct write.
        let bytes = b"254:0 Read 0\n254:0 Write 41951232\n254:0 Sync 83894272\n254:0 Async 0\n254:0 Discard 41943040\n254:0 Total 83894272\nTotal 83894272\n";
        let ops = b"254:0 Read 0\n254:0 Write 48\n254:0 Sync 52\n254:0 Async 0\n254:0 Discard 4\n254:0 Total 52\nTotal 52\n";
        let mut out = Vec::new();
        parse_rwstat(bytes, Counting::Bytes, &mut out);
        parse_rwstat(ops, Counting::Ops, &mut out);
        assert_eq!(out.len(), 1);
        let d = out[0];
        assert_eq!((d.major, d.minor), (254, 0));
        assert_eq!((d.rbytes, d.wbytes, d.dbytes), (0, 41_951_232, 41_943_040));
        assert_eq!((d.rios, d.wios, d.dios), (0, 48, 4));
    }

    #[test]
    fn device_limits() {
        assert_eq!(
            parse_device_limits("254:0 1048576\n8:0 5\n"),
            vec![(254, 0, 1_048_576), (8, 0, 5)]
        );
        assert!(parse_device_limits("").is_empty());
    }

    #[test]
    fn activation_writes_a_noop_rule() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(WRITE_BPS_DEVICE), "").unwrap();
        assert!(activate_accounting(dir.path(), &[(254, 0)]).is_empty());
        assert_eq!(
            std::fs::read_to_string(dir.path().join(WRITE_BPS_DEVICE)).unwrap(),
            "254:0 0"
        );
        let missing = activate_accounting(&dir.path().join("nope"), &[(8, 0)]);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].contains("8:0 0"), "{}", missing[0]);
    }
}
