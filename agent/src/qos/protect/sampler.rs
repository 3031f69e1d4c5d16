//! The fast sampler: for each watched workload only the files its floors (or
//! a hold) need — `cpu.stat`, `memory.current`, `io.stat` and the matching
//! pressure files — kept open and re-read through the cgroup layer every tick,
//! in a short ring so usage and stall can be taken over a sliding window.
//! (`memory.stat` and friends, which the kernel builds expensively, are left
//! to the slow sensing loop.)

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cgroup::fs::{OpenMode, StatFile};
use crate::cgroup::parse::psi;
use crate::cgroup::stats::IoStats;
use crate::cgroup::{AnyBackend, CgroupError, CgroupPath, v1, v2};

/// What to read for one workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// CPU usage and CPU pressure.
    pub cpu: bool,
    /// Memory usage and memory pressure.
    pub memory: bool,
    /// IO bytes and IO pressure.
    pub io: bool,
    /// The pressure files too (reserved workloads).
    pub pressure: bool,
}

/// Counters at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When read.
    pub at: Instant,
    /// CPU time, ns.
    pub cpu_ns: u64,
    /// Memory charged, bytes.
    pub memory: u64,
    /// `(major, minor, read bytes, written bytes)` per device.
    pub io: Vec<(u32, u32, u64, u64)>,
    /// PSI `some` totals in µs: cpu, memory, io.
    pub stall_us: [Option<u64>; 3],
}

/// Rates over a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    /// Window actually covered.
    pub span: Duration,
    /// CPUs used.
    pub cpu_cores: f64,
    /// Memory now, bytes.
    pub memory: u64,
    /// `(major, minor, read B/s, write B/s)` per device.
    pub io: Vec<(u32, u32, f64, f64)>,
    /// Share of the window stalled (PSI `some`): cpu, memory, io.
    pub stall: [f64; 3],
}

impl Rates {
    /// Read bytes/s over all devices.
    pub fn io_read(&self) -> f64 {
        self.io.iter().map(|d| d.2).sum()
    }
    /// Written bytes/s over all devices.
    pub fn io_write(&self) -> f64 {
        self.io.iter().map(|d| d.3).sum()
    }
}

#[derive(Debug)]
enum CpuFile {
    /// v2 `cpu.stat` (also the unified mount's on hybrid hosts).
    Stat(StatFile),
    /// v1 `cpuacct.usage`.
    Usage(StatFile),
}

#[derive(Debug)]
enum IoFile {
    V2(StatFile),
    V1(StatFile),
}

/// The open files and samples of one cgroup.
#[derive(Debug)]
pub struct Series {
    cpu: Option<CpuFile>,
    memory: Option<StatFile>,
    io: Option<IoFile>,
    psi: [Option<StatFile>; 3],
    io_buf: Vec<IoStats>,
    ring: VecDeque<Sample>,
    keep: Duration,
}

fn open(path: &Path) -> Result<Option<StatFile>, CgroupError> {
    OpenMode::KeepOpen.open_optional(path.to_path_buf())
}

impl Series {
    /// Opens what `need` asks for in `cg`; keeps samples covering `keep`.
    /// `Gone` when the cgroup does not exist.
    pub fn open(
        backend: &AnyBackend,
        cg: &CgroupPath,
        need: Need,
        keep: Duration,
    ) -> Result<Self, CgroupError> {
        let (cpu, memory, io, psi_dir) = match backend {
            AnyBackend::V2(b) => {
                let d = b.dir(cg);
                if !d.is_dir() {
                    return Err(CgroupError::Gone { path: d });
                }
                let cpu = if need.cpu {
                    open(&d.join(v2::cpu::STAT))?.map(CpuFile::Stat)
                } else {
                    None
                };
                let memory = if need.memory {
                    open(&d.join(v2::memory::CURRENT))?
                } else {
                    None
                };
                let io = if need.io {
                    open(&d.join(v2::io::STAT))?.map(IoFile::V2)
                } else {
                    None
                };
                (cpu, memory, io, Some(d))
            }
            AnyBackend::V1(b) => {
                let dir = |c: &str| b.mount(c).map(|m| cg.under(m)).filter(|d| d.is_dir());
                let unified = b.unified().map(|u| cg.under(u)).filter(|d| d.is_dir());
                if dir("cpuacct").is_none() && dir("memory").is_none() && unified.is_none() {
                    return Err(CgroupError::Gone {
                        path: cg.to_string().into(),
                    });
                }
                let cpu = if need.cpu {
                    match dir("cpuacct") {
                        Some(d) => open(&d.join(v1::cpuacct::USAGE))?.map(CpuFile::Usage),
                        None => match &unified {
                            Some(u) => open(&u.join(v2::cpu::STAT))?.map(CpuFile::Stat),
                            None => None,
                        },
                    }
                } else {
                    None
                };
                let memory = match (need.memory, dir("memory")) {
                    (true, Some(d)) => open(&d.join(v1::memory::USAGE))?,
                    _ => None,
                };
                let io = match (need.io, dir("blkio")) {
                    (true, Some(d)) => open(&d.join(v1::blkio::IO_SERVICE_BYTES))?.map(IoFile::V1),
                    _ => None,
                };
                (cpu, memory, io, unified)
            }
        };
        let mut psi = [None, None, None];
        if need.pressure
            && let Some(d) = psi_dir
        {
            for (i, (wanted, file)) in [
                (need.cpu, v2::psi::CPU),
                (need.memory, v2::psi::MEMORY),
                (need.io, v2::psi::IO),
            ]
            .into_iter()
            .enumerate()
            {
                if wanted {
                    psi[i] = open(&d.join(file))?;
                }
            }
        }
        Ok(Series {
            cpu,
            memory,
            io,
            psi,
            io_buf: Vec::new(),
            ring: VecDeque::new(),
            keep,
        })
    }

    /// Reads one sample.
    pub fn read(&mut self, buf: &mut Vec<u8>, now: Instant) -> Result<(), CgroupError> {
        let mut small = [0u8; 2048];
        let cpu_ns = match &mut self.cpu {
            Some(CpuFile::Stat(f)) => {
                let text = small_or_full(f, &mut small, buf)?;
                v2::cpu::parse_stat(text).map_or(0, |c| c.usage_ns)
            }
            Some(CpuFile::Usage(f)) => {
                let text = small_or_full(f, &mut small, buf)?;
                crate::cgroup::parse::single_u64(text).unwrap_or(0)
            }
            None => 0,
        };
        let memory = match &mut self.memory {
            Some(f) => {
                crate::cgroup::parse::single_u64(small_or_full(f, &mut small, buf)?).unwrap_or(0)
            }
            None => 0,
        };
        let io = match &mut self.io {
            Some(IoFile::V2(f)) => {
                f.read_into(buf)?;
                v2::io::parse_stat(buf, &mut self.io_buf);
                self.io_buf
                    .iter()
                    .map(|d| (d.major, d.minor, d.rbytes, d.wbytes))
                    .collect()
            }
            Some(IoFile::V1(f)) => {
                f.read_into(buf)?;
                self.io_buf.clear();
                v1::blkio::parse_rwstat(buf, v1::blkio::Counting::Bytes, &mut self.io_buf);
                self.io_buf
                    .iter()
                    .map(|d| (d.major, d.minor, d.rbytes, d.wbytes))
                    .collect()
            }
            None => Vec::new(),
        };
        let mut stall_us = [None; 3];
        for (i, f) in self.psi.iter_mut().enumerate() {
            if let Some(f) = f {
                stall_us[i] = psi(small_or_full(f, &mut small, buf)?).map(|p| p.some.total_us);
            }
        }
        self.ring.push_back(Sample {
            at: now,
            cpu_ns,
            memory,
            io,
            stall_us,
        });
        while self.ring.len() > 2
            && self
                .ring
                .front()
                .is_some_and(|f| now.saturating_duration_since(f.at) > self.keep)
        {
            self.ring.pop_front();
        }
        Ok(())
    }

    /// Rates between the newest sample and the oldest one within `window`;
    /// `None` until two samples exist.
    pub fn rates(&self, window: Duration) -> Option<Rates> {
        let first = self.window_start(window)?;
        Some(rates_between(&self.ring[first], self.ring.back()?))
    }

    /// Index of the oldest sample within `window` of the newest (the one
    /// before the newest when none is), `None` until two samples exist.
    fn window_start(&self, window: Duration) -> Option<usize> {
        let last = self.ring.back()?;
        self.ring
            .iter()
            .position(|s| last.at.saturating_duration_since(s.at) <= window && s.at < last.at)
            .or_else(|| self.ring.len().checked_sub(2))
    }

    /// [`Self::rates`] for judging an IO floor: `None` while the window began
    /// with the workload idle on IO (no byte moved and no IO stall in its first
    /// step), so a workload that has just started or resumed reading is not
    /// judged by a window it spent partly idle — the loop read a reader's first
    /// second as "29 % of its floor" and held the hog for 3 s. A workload
    /// starved of IO is never idle that way: it stalls. Without IO pressure
    /// figures every window is judged.
    pub fn busy_io_rates(&self, window: Duration) -> Option<Rates> {
        let first = self.window_start(window)?;
        let (a, b) = (self.ring.get(first)?, self.ring.get(first + 1)?);
        if io_idle(a, b) {
            return None;
        }
        Some(rates_between(a, self.ring.back()?))
    }
}

/// No IO moved between `a` and `b` and the workload did not wait on IO
/// (false when IO pressure is not known).
fn io_idle(a: &Sample, b: &Sample) -> bool {
    let stalled = match (a.stall_us[2], b.stall_us[2]) {
        (Some(x), Some(y)) => y > x,
        _ => return false,
    };
    !stalled && a.io == b.io
}

/// The content of `f`: from the stack buffer when it fits, else read whole into `buf`.
fn small_or_full<'a>(
    f: &mut StatFile,
    small: &'a mut [u8],
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], CgroupError> {
    match f.read_small(small)? {
        Some(text) => Ok(text),
        None => {
            f.read_into(buf)?;
            Ok(buf.as_slice())
        }
    }
}

/// Rates from `a` to `b`. Counters that went backwards (cgroup recreated) count as 0.
pub fn rates_between(a: &Sample, b: &Sample) -> Rates {
    let span = b.at.saturating_duration_since(a.at);
    let secs = span.as_secs_f64().max(1e-6);
    let stall = |i: usize| match (a.stall_us[i], b.stall_us[i]) {
        (Some(x), Some(y)) => (y.saturating_sub(x) as f64 / 1e6 / secs).min(1.0),
        _ => 0.0,
    };
    let io =
        b.io.iter()
            .map(|&(ma, mi, r, w)| {
                let (r0, w0) =
                    a.io.iter()
                        .find(|d| (d.0, d.1) == (ma, mi))
                        .map_or((r, w), |d| (d.2, d.3));
                (
                    ma,
                    mi,
                    r.saturating_sub(r0) as f64 / secs,
                    w.saturating_sub(w0) as f64 / secs,
                )
            })
            .collect();
    Rates {
        span,
        cpu_cores: b.cpu_ns.saturating_sub(a.cpu_ns) as f64 / 1e9 / secs,
        memory: b.memory,
        io,
        stall: [stall(0), stall(1), stall(2)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, cpu_ns: u64, rb: u64, stall: u64) -> Sample {
        Sample {
            at,
            cpu_ns,
            memory: 7,
            io: vec![(254, 0, rb, 0)],
            stall_us: [Some(stall), None, Some(0)],
        }
    }

    #[test]
    fn rates_over_a_window() {
        let t0 = Instant::now();
        let a = sample(t0, 0, 0, 0);
        let b = sample(
            t0 + Duration::from_millis(50),
            75_000_000,
            5_000_000,
            25_000,
        );
        let r = rates_between(&a, &b);
        assert!((r.cpu_cores - 1.5).abs() < 1e-9);
        assert!((r.io_read() - 100_000_000.0).abs() < 1.0);
        assert!((r.stall[0] - 0.5).abs() < 1e-9);
        assert_eq!(r.stall[1], 0.0);
        assert_eq!(r.memory, 7);
        let c = sample(t0 + Duration::from_millis(60), 1, 0, 0);
        assert_eq!(rates_between(&b, &c).cpu_cores, 0.0);
    }

    fn io_sample(at: Instant, rb: u64, io_stall: Option<u64>) -> Sample {
        Sample {
            at,
            cpu_ns: 0,
            memory: 0,
            io: vec![(254, 0, rb, 0)],
            stall_us: [None, None, io_stall],
        }
    }

    fn series(samples: Vec<Sample>) -> Series {
        Series {
            cpu: None,
            memory: None,
            io: None,
            psi: [None, None, None],
            io_buf: Vec::new(),
            ring: samples.into(),
            keep: Duration::from_secs(10),
        }
    }

    #[test]
    fn an_io_window_that_began_idle_is_not_judged_but_a_starved_one_is() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let window = Duration::from_millis(1000);
        // Idle for its first 400 ms, then reading: not judged until the
        // window begins after the reads did.
        let starting: Vec<Sample> = (0..=100)
            .map(|i| {
                let busy = i * 10 > 400;
                let rb = if busy { (i - 40) * 1_000_000 } else { 0 };
                io_sample(
                    ms(i * 10),
                    rb,
                    Some(if busy { (i - 40) * 5_000 } else { 0 }),
                )
            })
            .collect();
        let s = series(starting.clone());
        assert!(s.rates(window).is_some(), "plain rates still answer");
        assert_eq!(s.busy_io_rates(window), None);
        let mut later = starting;
        later.extend(
            (101..=150)
                .map(|i| io_sample(ms(i * 10), (i - 40) * 1_000_000, Some((i - 40) * 5_000))),
        );
        let r = series(later)
            .busy_io_rates(window)
            .expect("judged once busy all window");
        assert!((r.io_read() - 100e6).abs() < 1e6, "{}", r.io_read());
        // Starved: no byte moves, but it waits on IO: judged (at 0 B/s).
        let starved: Vec<Sample> = (0..=100)
            .map(|i| io_sample(ms(i * 10), 0, Some(i * 9_000)))
            .collect();
        let r = series(starved)
            .busy_io_rates(window)
            .expect("a starved reader is judged");
        assert_eq!(r.io_read(), 0.0);
        // Without IO pressure figures, judged as before.
        let blind: Vec<Sample> = (0..=100).map(|i| io_sample(ms(i * 10), 0, None)).collect();
        assert!(series(blind).busy_io_rates(window).is_some());
    }

    #[test]
    fn reads_only_what_is_needed_from_a_real_cgroup() {
        let b = AnyBackend::detect().unwrap();
        let root = CgroupPath::root();
        let need = Need {
            cpu: true,
            memory: false,
            io: false,
            pressure: false,
        };
        let mut s = Series::open(&b, &root, need, Duration::from_secs(1)).unwrap();
        assert!(s.memory.is_none() && s.io.is_none() && s.psi.iter().all(Option::is_none));
        let mut buf = Vec::new();
        s.read(&mut buf, Instant::now()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.read(&mut buf, Instant::now()).unwrap();
        assert!(s.rates(Duration::from_secs(1)).is_some());
        let gone = Series::open(
            &b,
            &CgroupPath::new("daros-test-no-such-cgroup").unwrap(),
            need,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(gone.is_gone());
    }
}
