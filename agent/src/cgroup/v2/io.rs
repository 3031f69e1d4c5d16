//! cgroup v2 `io` controller files.

use crate::cgroup::parse::{nested_keyed, parse_dev, parse_u64};
use crate::cgroup::stats::IoStats;

/// Per-device byte and operation counters.
pub const STAT: &str = "io.stat";
/// Per-device limits.
pub const MAX: &str = "io.max";
/// Proportional weight of the iocost controller (`default N`, then `MAJ:MIN N` overrides);
/// without io.cost enabled on a device it is accepted but has no effect there.
pub const WEIGHT: &str = "io.weight";
/// Proportional weight of the BFQ scheduler (1–1000), where a device uses BFQ.
pub const BFQ_WEIGHT: &str = "io.bfq.weight";
/// iocost parameters per device (root cgroup only); `enable=1` turns io.weight on.
pub const COST_QOS: &str = "io.cost.qos";
/// Latency target (`MAJ:MIN target=<us>`).
pub const LATENCY: &str = "io.latency";

/// One line of `io.max`: limits of one device (`None` = unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoMaxLine {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Read bytes per second.
    pub rbps: Option<u64>,
    /// Write bytes per second.
    pub wbps: Option<u64>,
    /// Read operations per second.
    pub riops: Option<u64>,
    /// Write operations per second.
    pub wiops: Option<u64>,
}

impl IoMaxLine {
    /// Unlimited on `major:minor`.
    pub fn unlimited(major: u32, minor: u32) -> Self {
        IoMaxLine {
            major,
            minor,
            ..IoMaxLine::default()
        }
    }

    /// The line as written to `io.max` (every key, `max` for unlimited, which
    /// clears the device's rule when all are `max`).
    pub fn render(&self) -> String {
        let v = |x: Option<u64>| x.map_or_else(|| "max".to_string(), |n| n.to_string());
        format!(
            "{}:{} rbps={} wbps={} riops={} wiops={}",
            self.major,
            self.minor,
            v(self.rbps),
            v(self.wbps),
            v(self.riops),
            v(self.wiops)
        )
    }
}

/// Parses `io.max` (devices without a rule have no line).
pub fn parse_max(text: &str) -> Vec<IoMaxLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let Some((major, minor)) = parts.next().and_then(|d| parse_dev(d.as_bytes())) else {
            continue;
        };
        let mut l = IoMaxLine::unlimited(major, minor);
        for kv in parts {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v = if v == "max" { None } else { v.parse().ok() };
            match k {
                "rbps" => l.rbps = v,
                "wbps" => l.wbps = v,
                "riops" => l.riops = v,
                "wiops" => l.wiops = v,
                _ => {}
            }
        }
        out.push(l);
    }
    out
}

/// The `default` weight of an `io.weight` / `io.bfq.weight` file.
pub fn parse_default_weight(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut p = l.split_whitespace();
        match (p.next(), p.next()) {
            (Some("default"), Some(v)) => v.parse().ok(),
            _ => None,
        }
    })
}

/// True when `io.cost.qos` enables iocost on `major:minor`.
pub fn cost_enabled(text: &str, major: u32, minor: u32) -> bool {
    let dev = format!("{major}:{minor}");
    text.lines().any(|l| {
        let mut p = l.split_whitespace();
        p.next() == Some(dev.as_str()) && p.any(|kv| kv == "enable=1")
    })
}

/// Parses `io.stat` into `out` (cleared first).
pub fn parse_stat(buf: &[u8], out: &mut Vec<IoStats>) {
    out.clear();
    nested_keyed(buf, |head, k, v| {
        let (Some((major, minor)), Some(v)) = (parse_dev(head), parse_u64(v)) else {
            return;
        };
        let e = IoStats::entry(out, major, minor);
        match k {
            b"rbytes" => e.rbytes = v,
            b"wbytes" => e.wbytes = v,
            b"rios" => e.rios = v,
            b"wios" => e.wios = v,
            b"dbytes" => e.dbytes = v,
            b"dios" => e.dios = v,
            _ => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_weight_and_cost() {
        let lines = parse_max(
            "254:0 rbps=2097152 wbps=max riops=max wiops=100\n8:0 rbps=max wbps=max riops=max wiops=max\n",
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].rbps, Some(2_097_152));
        assert_eq!(lines[0].wiops, Some(100));
        assert_eq!(lines[1], IoMaxLine::unlimited(8, 0));
        assert_eq!(
            lines[0].render(),
            "254:0 rbps=2097152 wbps=max riops=max wiops=100"
        );
        assert_eq!(parse_default_weight("default 100\n8:0 50\n"), Some(100));
        assert_eq!(parse_default_weight(""), None);
        let qos = "254:0 enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00\n8:0 enable=1 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00\n";
        assert!(!cost_enabled(qos, 254, 0));
        assert!(cost_enabled(qos, 8, 0));
        assert!(!cost_enabled(qos, 9, 0));
    }

    #[test]
    fn two_devices() {
        let mut out = Vec::new();
        parse_stat(b"8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252 dbytes=50331648 dios=3021\n", &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].major, 8);
        assert_eq!(out[1].minor, 0);
        assert_eq!(out[1].dbytes, 50_331_648);
        assert_eq!(out[0].wios, 353);
        parse_stat(b"", &mut out);
        assert!(out.is_empty());
    }
}
