//! Node sensing from `/proc`: CPU, memory, disks, network and pressure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cgroup::fs::{CgroupError, OpenMode, StatFile};
use crate::cgroup::parse::{parse_u64, psi};
use crate::model::node::{DiskSample, NetSample, NodeCpu, NodeMemory};
use crate::model::pressure::PsiSample;

use super::devices::{Disk, whole_disks};
use super::rate::Counter;

/// The node part of one tick.
#[derive(Debug, Clone, Default)]
pub struct NodeReading {
    /// CPU.
    pub cpu: NodeCpu,
    /// Memory.
    pub memory: NodeMemory,
    /// Disks.
    pub disks: Vec<DiskSample>,
    /// Network interfaces.
    pub network: Vec<NetSample>,
    /// Pressure (`None` without PSI).
    pub psi: Option<PsiSample>,
}

#[derive(Debug, Clone, Copy, Default)]
struct CpuTimes {
    user: u64,
    nice: u64,
    system: u64,
    idle: u64,
    iowait: u64,
    irq: u64,
    softirq: u64,
    steal: u64,
}

impl CpuTimes {
    fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }
    fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait
    }
}

#[derive(Debug, Default)]
struct DiskPrev {
    reads: Counter,
    writes: Counter,
    rbytes: Counter,
    wbytes: Counter,
    io_ms: Counter,
    seen: bool,
}

#[derive(Debug, Default)]
struct NetPrev {
    rx: Counter,
    tx: Counter,
    rxp: Counter,
    txp: Counter,
    seen: bool,
}

/// Where the node files live (a test can point them elsewhere).
#[derive(Debug, Clone)]
pub struct ProcPaths {
    /// `/proc`.
    pub proc: PathBuf,
    /// `/sys/block`.
    pub sys_block: PathBuf,
}

impl Default for ProcPaths {
    fn default() -> Self {
        ProcPaths {
            proc: PathBuf::from("/proc"),
            sys_block: PathBuf::from("/sys/block"),
        }
    }
}

/// Reads node counters and turns them into a [`NodeReading`].
#[derive(Debug)]
pub struct NodeSensor {
    paths: ProcPaths,
    stat: StatFile,
    meminfo: StatFile,
    diskstats: StatFile,
    netdev: StatFile,
    psi: [Option<StatFile>; 3],
    ticks_per_second: f64,
    exclude_devices: Vec<String>,
    exclude_interfaces: Vec<String>,
    disks: Vec<Disk>,
    prev_cpu: Option<(CpuTimes, Instant)>,
    disk_prev: HashMap<String, DiskPrev>,
    net_prev: HashMap<String, NetPrev>,
}

impl NodeSensor {
    /// Opens the node files. `exclude_devices`/`exclude_interfaces` are name prefixes.
    pub fn new(
        paths: ProcPaths,
        exclude_devices: Vec<String>,
        exclude_interfaces: Vec<String>,
    ) -> Result<Self, CgroupError> {
        let p = &paths.proc;
        let mode = OpenMode::KeepOpen;
        let pressure = p.join("pressure");
        let mut s = NodeSensor {
            stat: mode.open(p.join("stat"))?,
            meminfo: mode.open(p.join("meminfo"))?,
            diskstats: mode.open(p.join("diskstats"))?,
            netdev: mode.open(p.join("net/dev"))?,
            psi: [
                mode.open_optional(pressure.join("cpu"))?,
                mode.open_optional(pressure.join("memory"))?,
                mode.open_optional(pressure.join("io"))?,
            ],
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            exclude_devices,
            exclude_interfaces,
            disks: Vec::new(),
            prev_cpu: None,
            disk_prev: HashMap::new(),
            net_prev: HashMap::new(),
            paths,
        };
        s.refresh_devices();
        Ok(s)
    }

    /// Re-lists whole disks (call when devices may have changed).
    pub fn refresh_devices(&mut self) {
        self.disks = whole_disks(&self.paths.sys_block, &self.exclude_devices);
    }

    /// Whole disks currently sampled.
    pub fn disks(&self) -> &[Disk] {
        &self.disks
    }

    /// True if the kernel exposes `/proc/pressure`.
    pub fn has_psi(&self) -> bool {
        self.psi.iter().any(Option::is_some)
    }

    /// The `/proc` directory in use.
    pub fn proc_root(&self) -> &Path {
        &self.paths.proc
    }

    /// Reads every node file once.
    pub fn read(&mut self, buf: &mut Vec<u8>, at: Instant) -> Result<NodeReading, CgroupError> {
        let mut out = NodeReading::default();
        self.stat.read_into(buf)?;
        self.read_cpu(buf, at, &mut out.cpu);
        self.meminfo.read_into(buf)?;
        out.memory = parse_meminfo(buf);
        self.diskstats.read_into(buf)?;
        self.read_disks(buf, at, &mut out.disks);
        self.netdev.read_into(buf)?;
        self.read_net(buf, at, &mut out.network);
        if self.has_psi() {
            let mut p = PsiSample::default();
            for (i, f) in self.psi.iter_mut().enumerate() {
                let Some(f) = f else { continue };
                f.read_into(buf)?;
                let v = psi(buf).map(Into::into);
                match i {
                    0 => p.cpu = v,
                    1 => p.memory = v,
                    _ => p.io = v,
                }
            }
            out.psi = Some(p);
        }
        Ok(out)
    }

    fn read_cpu(&mut self, buf: &[u8], at: Instant, out: &mut NodeCpu) {
        let mut cpus = 0u32;
        let mut times = CpuTimes::default();
        for line in buf.split(|&c| c == b'\n') {
            if !line.starts_with(b"cpu") {
                continue;
            }
            let mut f = line.split(|&c| c == b' ').filter(|s| !s.is_empty());
            let Some(head) = f.next() else { continue };
            if head != b"cpu" {
                cpus += 1;
                continue;
            }
            let v: Vec<u64> = f.take(8).map(|x| parse_u64(x).unwrap_or(0)).collect();
            if v.len() == 8 {
                times = CpuTimes {
                    user: v[0],
                    nice: v[1],
                    system: v[2],
                    idle: v[3],
                    iowait: v[4],
                    irq: v[5],
                    softirq: v[6],
                    steal: v[7],
                };
            }
        }
        let hz = self.ticks_per_second.max(1.0);
        out.cpus = cpus;
        out.user_seconds_total = (times.user + times.nice) as f64 / hz;
        out.system_seconds_total = (times.system + times.irq + times.softirq) as f64 / hz;
        out.idle_seconds_total = times.idle as f64 / hz;
        out.iowait_seconds_total = times.iowait as f64 / hz;
        out.steal_seconds_total = times.steal as f64 / hz;
        if let Some((prev, _)) = self.prev_cpu
            && times.total() > prev.total()
            && times.busy() >= prev.busy()
        {
            let util = (times.busy() - prev.busy()) as f64 / (times.total() - prev.total()) as f64;
            let util = util.clamp(0.0, 1.0);
            out.utilization = Some(util);
            out.usage_cores = Some(util * f64::from(cpus));
        }
        self.prev_cpu = Some((times, at));
    }

    fn read_disks(&mut self, buf: &[u8], at: Instant, out: &mut Vec<DiskSample>) {
        for p in self.disk_prev.values_mut() {
            p.seen = false;
        }
        for line in buf.split(|&c| c == b'\n') {
            let mut f = line.split(|&c| c == b' ').filter(|s| !s.is_empty());
            let (Some(ma), Some(mi), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let (Some(ma), Some(mi)) = (parse_u64(ma), parse_u64(mi)) else {
                continue;
            };
            let Some(disk) = self.disks.iter().find(|d| {
                u64::from(d.major) == ma && u64::from(d.minor) == mi && d.name.as_bytes() == name
            }) else {
                continue;
            };
            let v: Vec<u64> = f.take(10).map(|x| parse_u64(x).unwrap_or(0)).collect();
            if v.len() < 10 {
                continue;
            }
            let (reads, rsect, writes, wsect, io_ms) = (v[0], v[2], v[4], v[6], v[9]);
            let prev = self.disk_prev.entry(disk.name.clone()).or_default();
            prev.seen = true;
            let io_rate = prev.io_ms.update(io_ms, at);
            out.push(DiskSample {
                device: disk.name.clone(),
                dev: format!("{}:{}", disk.major, disk.minor),
                reads_total: reads,
                writes_total: writes,
                read_bytes_total: rsect.saturating_mul(512),
                write_bytes_total: wsect.saturating_mul(512),
                io_time_seconds_total: io_ms as f64 / 1000.0,
                read_bytes_per_second: prev.rbytes.update(rsect.saturating_mul(512), at),
                write_bytes_per_second: prev.wbytes.update(wsect.saturating_mul(512), at),
                reads_per_second: prev.reads.update(reads, at),
                writes_per_second: prev.writes.update(writes, at),
                utilization: io_rate.map(|ms_per_s| (ms_per_s / 1000.0).clamp(0.0, 1.0)),
            });
        }
        self.disk_prev.retain(|_, p| p.seen);
    }

    fn read_net(&mut self, buf: &[u8], at: Instant, out: &mut Vec<NetSample>) {
        for p in self.net_prev.values_mut() {
            p.seen = false;
        }
        for line in buf.split(|&c| c == b'\n') {
            let Some(colon) = line.iter().position(|&c| c == b':') else {
                continue;
            };
            let name = String::from_utf8_lossy(line[..colon].trim_ascii());
            if name.is_empty()
                || self
                    .exclude_interfaces
                    .iter()
                    .any(|p| name.starts_with(p.as_str()))
            {
                continue;
            }
            let v: Vec<u64> = line[colon + 1..]
                .split(|&c| c == b' ')
                .filter(|s| !s.is_empty())
                .take(12)
                .map(|x| parse_u64(x).unwrap_or(0))
                .collect();
            if v.len() < 12 {
                continue;
            }
            let (rx, rxp, rxe, rxd, tx, txp, txe, txd) =
                (v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]);
            let prev = self.net_prev.entry(name.to_string()).or_default();
            prev.seen = true;
            out.push(NetSample {
                interface: name.into_owned(),
                rx_bytes_total: rx,
                tx_bytes_total: tx,
                rx_packets_total: rxp,
                tx_packets_total: txp,
                rx_errors_total: rxe,
                tx_errors_total: txe,
                rx_dropped_total: rxd,
                tx_dropped_total: txd,
                rx_bytes_per_second: prev.rx.update(rx, at),
                tx_bytes_per_second: prev.tx.update(tx, at),
                rx_packets_per_second: prev.rxp.update(rxp, at),
                tx_packets_per_second: prev.txp.update(txp, at),
            });
        }
        self.net_prev.retain(|_, p| p.seen);
        out.sort_by(|a, b| a.interface.cmp(&b.interface));
    }
}

/// Parses `/proc/meminfo` (values in kB).
fn parse_meminfo(buf: &[u8]) -> NodeMemory {
    let mut m = NodeMemory::default();
    for line in buf.split(|&c| c == b'\n') {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let key = &line[..colon];
        let mut rest = line[colon + 1..]
            .split(|&c| c == b' ')
            .filter(|s| !s.is_empty());
        let Some(v) = rest.next().and_then(parse_u64) else {
            continue;
        };
        let bytes = v.saturating_mul(1024);
        match key {
            b"MemTotal" => m.total_bytes = bytes,
            b"MemFree" => m.free_bytes = bytes,
            b"MemAvailable" => m.available_bytes = bytes,
            b"Buffers" => m.buffers_bytes = bytes,
            b"Cached" => m.cached_bytes = bytes,
            b"SwapTotal" => m.swap_total_bytes = bytes,
            b"SwapFree" => m.swap_free_bytes = bytes,
            _ => {}
        }
    }
    m.used_bytes = m.total_bytes.saturating_sub(m.available_bytes);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fake_proc(dir: &Path, stat: &str, disk: &str, net: &str) {
        std::fs::create_dir_all(dir.join("net")).unwrap();
        std::fs::write(dir.join("stat"), stat).unwrap();
        std::fs::write(dir.join("meminfo"), "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\nBuffers:          100 kB\nCached:          2000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n").unwrap();
        std::fs::write(dir.join("diskstats"), disk).unwrap();
        std::fs::write(dir.join("net/dev"), net).unwrap();
    }

    const NET_HEADER: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n";

    #[test]
    fn rates_from_two_readings_and_resets() {
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join("proc");
        let sys_block = dir.path().join("block");
        std::fs::create_dir_all(sys_block.join("vda")).unwrap();
        std::fs::write(sys_block.join("vda/dev"), "254:0\n").unwrap();
        std::fs::create_dir_all(sys_block.join("loop0")).unwrap();
        std::fs::write(sys_block.join("loop0/dev"), "7:0\n").unwrap();
        fake_proc(
            &proc_dir,
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n",
            " 254       0 vda 10 0 100 5 20 0 200 5 0 10 10\n   7       0 loop0 1 0 8 0 0 0 0 0 0 0 0\n",
            &format!(
                "{NET_HEADER}    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n  eth0: 5000 50 1 2 0 0 0 0 7000 70 3 4 0 0 0 0\n"
            ),
        );
        let mut s = NodeSensor::new(
            ProcPaths {
                proc: proc_dir.clone(),
                sys_block,
            },
            vec!["loop".into()],
            vec!["lo".into()],
        )
        .unwrap();
        let mut buf = Vec::new();
        let t0 = Instant::now();
        let r = s.read(&mut buf, t0).unwrap();
        assert_eq!(r.cpu.cpus, 2);
        assert!(r.cpu.usage_cores.is_none());
        assert_eq!(r.memory.used_bytes, 8_000_000 * 1024);
        assert_eq!(r.disks.len(), 1);
        assert_eq!(r.disks[0].write_bytes_total, 200 * 512);
        assert_eq!(r.network.len(), 1);
        assert_eq!(r.network[0].interface, "eth0");
        assert_eq!(r.network[0].tx_dropped_total, 4);

        fake_proc(
            &proc_dir,
            "cpu  200 0 200 1400 0 0 0 0 0 0\ncpu0 100 0 100 700 0 0 0 0 0 0\ncpu1 100 0 100 700 0 0 0 0 0 0\n",
            " 254       0 vda 20 0 300 5 40 0 400 5 0 510 10\n",
            // eth0 counters reset (driver reload)
            &format!("{NET_HEADER}  eth0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n"),
        );
        let r = s.read(&mut buf, t0 + Duration::from_secs(1)).unwrap();
        // 200 busy of 800 total ticks
        assert!((r.cpu.utilization.unwrap() - 0.25).abs() < 1e-9);
        assert!((r.cpu.usage_cores.unwrap() - 0.5).abs() < 1e-9);
        let d = &r.disks[0];
        assert_eq!(d.read_bytes_per_second, Some(200.0 * 512.0));
        assert_eq!(d.writes_per_second, Some(20.0));
        assert_eq!(d.utilization, Some(0.5));
        assert_eq!(r.network[0].rx_bytes_per_second, None);
    }

    #[test]
    fn reads_this_host() {
        let mut s = NodeSensor::new(
            ProcPaths::default(),
            vec!["loop".into(), "ram".into()],
            vec![],
        )
        .unwrap();
        let mut buf = Vec::new();
        let r = s.read(&mut buf, Instant::now()).unwrap();
        assert!(r.cpu.cpus >= 1);
        assert!(r.memory.total_bytes > 0);
        assert!(r.network.iter().any(|n| n.interface == "lo"));
    }
}
