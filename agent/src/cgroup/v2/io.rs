//! cgroup v2 `io` controller files.

use crate::cgroup::parse::{nested_keyed, parse_dev, parse_u64};
use crate::cgroup::stats::IoStats;

/// Per-device byte and operation counters.
pub const STAT: &str = "io.stat";
/// Per-device limits.
pub const MAX: &str = "io.max";
/// Proportional weight.
pub const WEIGHT: &str = "io.weight";

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
