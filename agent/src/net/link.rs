//! Network capacity without hand configuration (issue 14): when neither
//! `[net]` nor `[qos]` names the node's bandwidth, it is taken from the link
//! speed of the interface the default route uses (`/sys/class/net/<if>/speed`,
//! Mb/s). A virtual NIC that does not know its speed (`-1`) gives none, and
//! the reason is kept for the floors' status.

use std::path::Path;

use daros_coordinator::BytesPerSec;

use crate::config::Config;

/// The interface of the default IPv4 route in a `/proc/net/route` text.
pub fn default_route_iface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"00000000") && f.get(7) == Some(&"00000000")).then(|| f[0].to_string())
    })
}

/// The link speed of `iface` under `sysfs_net` (`/sys/class/net`), bytes/s.
pub fn link_speed(sysfs_net: &Path, iface: &str) -> Result<u64, String> {
    let p = sysfs_net.join(iface).join("speed");
    let text = std::fs::read_to_string(&p)
        .map_err(|e| format!("{} does not tell the link speed ({e})", p.display()))?;
    match text.trim().parse::<i64>() {
        Ok(mbps) if mbps > 0 => Ok(mbps as u64 * 1_000_000 / 8),
        _ => Err(format!(
            "{iface} does not know its link speed ({} says {:?}: a virtual NIC)",
            p.display(),
            text.trim()
        )),
    }
}

/// Fills `[net] egress_capacity` and `ingress_capacity` from the default
/// route's link speed when nothing names them; says where the capacity
/// comes from (or why there is none).
pub fn derive(cfg: &mut Config, proc_route: &Path, sysfs_net: &Path) -> String {
    let n = &cfg.net;
    let q = &cfg.qos;
    if n.egress_capacity.is_some()
        || n.ingress_capacity.is_some()
        || q.network_egress_capacity.is_some()
        || q.network_ingress_capacity.is_some()
    {
        return "from the configuration".into();
    }
    if !n.enabled {
        return "the datapath is disabled ([net] enabled = false)".into();
    }
    let iface = match std::fs::read_to_string(proc_route)
        .ok()
        .and_then(|t| default_route_iface(&t))
    {
        Some(i) => i,
        None => return "no default route to take a link speed from".into(),
    };
    match link_speed(sysfs_net, &iface) {
        Ok(bps) => {
            cfg.net.egress_capacity = Some(BytesPerSec(bps));
            cfg.net.ingress_capacity = Some(BytesPerSec(bps));
            format!("the link speed of {iface} ({} Mb/s)", bps * 8 / 1_000_000)
        }
        Err(why) => why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        ens3\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";

    #[test]
    fn the_default_route_link_gives_the_capacity() {
        assert_eq!(default_route_iface(ROUTE).as_deref(), Some("ens3"));
        let d = tempfile::tempdir().unwrap();
        let route = d.path().join("route");
        std::fs::write(&route, ROUTE).unwrap();
        std::fs::create_dir_all(d.path().join("ens3")).unwrap();
        std::fs::write(d.path().join("ens3/speed"), "10000\n").unwrap();
        let mut cfg = Config::default();
        let note = derive(&mut cfg, &route, d.path());
        assert_eq!(cfg.net.egress_capacity, Some(BytesPerSec(1_250_000_000)));
        assert!(note.contains("ens3 (10000 Mb/s)"), "{note}");
        // A virtual NIC: no capacity, and why.
        std::fs::write(d.path().join("ens3/speed"), "-1\n").unwrap();
        let mut cfg = Config::default();
        let note = derive(&mut cfg, &route, d.path());
        assert_eq!(cfg.net.egress_capacity, None);
        assert!(note.contains("virtual NIC"), "{note}");
        // What the configuration says wins.
        let mut cfg = Config::default();
        cfg.net.egress_capacity = Some(BytesPerSec(1));
        assert_eq!(derive(&mut cfg, &route, d.path()), "from the configuration");
    }
}
