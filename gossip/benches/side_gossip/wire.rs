//! What both sides are measured with, from outside: bytes on loopback counted by nftables for a
//! port range, CPU time and resident memory from /proc.

use std::process::Command;

/// The gossip ports of either cluster: node i listens on `GOSSIP_BASE + i` (UDP, and TCP for
/// Serf's push-pull). Below the ephemeral range, so no client socket is counted by mistake.
pub const GOSSIP_BASE: u16 = 20_000;
/// Serf's RPC ports (not counted): `RPC_BASE + i`.
pub const RPC_BASE: u16 = 24_000;
const TABLE: &str = "daros_bench_gossip";

/// nftables counters of every packet to or from the gossip port range, removed on drop.
pub struct WireCounter;

impl WireCounter {
    pub fn install(nodes: usize) -> Self {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", TABLE])
            .stderr(std::process::Stdio::null())
            .status();
        let hi = GOSSIP_BASE as usize + nodes - 1;
        let r = format!("{GOSSIP_BASE}-{hi}");
        // Loopback packets pass the output hook once; a gossip packet has its destination port
        // in the range (UDP: both ports; TCP: the dialled side), a TCP answer its source port.
        let rules = format!(
            "table inet {TABLE} {{
  counter gossip {{ }}
  chain out {{
    type filter hook output priority 0; policy accept;
    udp dport {r} counter name gossip
    tcp dport {r} counter name gossip
    tcp sport {r} counter name gossip
  }}
}}"
        );
        let st = Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(rules.as_bytes())?;
                c.wait()
            })
            .expect("nft (install nftables; run as root)");
        assert!(st.success(), "nft refused the counting table");
        WireCounter
    }

    /// IP bytes counted so far.
    pub fn bytes(&self) -> u64 {
        let out = Command::new("nft")
            .args(["list", "counter", "inet", TABLE, "gossip"])
            .output()
            .expect("nft list counter");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .skip_while(|w| *w != "bytes")
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("a byte count in nft's output")
    }
}

impl Drop for WireCounter {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", TABLE])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// User + system CPU seconds of a process.
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) start at state, field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime is field 14, stime 15: indexes 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Resident memory of a process, bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Load average over the last minute.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

/// Nearest-rank percentile of unsorted samples.
pub fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}
