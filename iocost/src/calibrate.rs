//! Measuring a device's linear model, in the spirit of the kernel's
//! `tools/cgroup/iocost_coef_gen.py` and resctl-bench's iocost-tune but short and
//! bounded: a scratch file on the device is filled with large direct writes
//! (write bandwidth), then each of the other five coefficients is the rate of
//! one access pattern over a fixed time with several IOs in flight, all with
//! `O_DIRECT` so the page cache is never measured. The file is removed however
//! the run ends.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::IoCostError;
use crate::model::LinearModel;

/// Alignment and size of the small IOs (the model's IOPS are of 4 KiB IOs).
const PAGE: usize = 4096;
/// Size of the sequential-bandwidth IOs.
const BIG: usize = 1 << 20;
/// Name of the scratch file in the calibration directory.
pub const SCRATCH: &str = ".daros-iocost-calibration";

/// How long and how large a calibration is.
#[derive(Debug, Clone, Copy)]
pub struct CalibrationPlan {
    /// Time spent on each of the five timed patterns.
    pub phase: Duration,
    /// Scratch file size; smaller when the filesystem has less than 4× free.
    pub file_bytes: u64,
    /// The fill (write bandwidth) stops after this long with what it wrote.
    pub max_fill: Duration,
    /// IOs in flight for the 4 KiB patterns, sequential and random alike
    /// (threads, one IO each), so the two IOPS compare like for like.
    pub iops_depth: usize,
    /// IOs in flight for the 1 MiB sequential reads: enough to saturate the
    /// device, as the kernel's `iocost_coef_gen.py` reads 128 MiB at a time
    /// (split into the whole request queue). At 4 the model's `rbps` was 2.6
    /// GB/s on a disk a deeper reader drove at 3.7, and iocost's budget, the
    /// model × vrate, left a hog beside a protected reader only what the
    /// under-measured ceiling allowed (docs/benchmarks.md, "IO with iocost's
    /// latency targets").
    pub bandwidth_depth: usize,
}

impl Default for CalibrationPlan {
    fn default() -> Self {
        CalibrationPlan {
            phase: Duration::from_millis(1500),
            file_bytes: 256 << 20,
            max_fill: Duration::from_secs(10),
            iops_depth: 16,
            bandwidth_depth: 16,
        }
    }
}

/// Smallest scratch file a calibration accepts.
const MIN_FILE: u64 = 16 << 20;

/// The 95th percentile latency of 4 KiB random IOs issued one at a time on
/// the otherwise idle device: what a read or write costs with no queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleLatency {
    /// Reads (µs).
    pub read_p95_us: u64,
    /// Writes (µs).
    pub write_p95_us: u64,
}

/// A measured model and how it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The coefficients.
    pub model: LinearModel,
    /// Latency with no queue (absent from models cached before it was measured).
    #[serde(default)]
    pub idle_latency: Option<IdleLatency>,
    /// Size of the scratch file the patterns ran over.
    pub file_bytes: u64,
    /// Wall time of the whole calibration.
    pub took_ms: u64,
}

/// Measures the model of the device holding `dir` (which must be writable).
pub fn measure(dir: &Path, plan: &CalibrationPlan) -> Result<Measured, IoCostError> {
    let t0 = Instant::now();
    let free = rustix::fs::statvfs(dir)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .map_err(|e| IoCostError::io(dir, "statvfs", e.into()))?;
    let size = plan.file_bytes.min(free / 4) / BIG as u64 * BIG as u64;
    if size < MIN_FILE {
        return Err(IoCostError::Calibration(format!(
            "{}: room for a {} MiB scratch file ({} MiB free, a quarter of it at most); a calibration needs {} MiB",
            dir.display(),
            size >> 20,
            free >> 20,
            MIN_FILE >> 20
        )));
    }
    let scratch = Scratch::create(dir.join(SCRATCH))?;
    let fd = &scratch.fd;
    let (written, fill) = fill(fd, size, plan.max_fill)
        .map_err(|e| IoCostError::io(&scratch.path, "direct write", e))?;
    if written < MIN_FILE {
        return Err(IoCostError::Calibration(format!(
            "{}: only {} MiB written in {:?}",
            scratch.path.display(),
            written >> 20,
            plan.max_fill
        )));
    }
    let wbps = per_sec(written, fill);
    let run = |w: bool, io: usize, random: bool, depth: usize| {
        pattern(
            fd,
            written,
            Pattern {
                write: w,
                io,
                random,
            },
            depth,
            plan.phase,
        )
        .map_err(|e| IoCostError::io(&scratch.path, "direct IO", e))
    };
    let (d, bd) = (plan.iops_depth.max(1), plan.bandwidth_depth.max(1));
    let wseqiops = run(true, PAGE, false, d)?.ops_per_sec();
    let wrandiops = run(true, PAGE, true, d)?.ops_per_sec();
    let rbps = run(false, BIG, false, bd)?.bytes_per_sec();
    let rseqiops = run(false, PAGE, false, d)?.ops_per_sec();
    let rrandiops = run(false, PAGE, true, d)?.ops_per_sec();
    let p95 = |write: bool| {
        idle_p95(fd, written, write, plan.phase / 2)
            .map_err(|e| IoCostError::io(&scratch.path, "direct IO", e))
    };
    let idle_latency = IdleLatency {
        read_p95_us: p95(false)?,
        write_p95_us: p95(true)?,
    };
    drop(scratch);
    Ok(Measured {
        model: LinearModel {
            rbps,
            rseqiops,
            rrandiops,
            wbps,
            wseqiops,
            wrandiops,
        },
        idle_latency: Some(idle_latency),
        file_bytes: written,
        took_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// The scratch file, removed on drop.
struct Scratch {
    path: PathBuf,
    fd: OwnedFd,
}

impl Scratch {
    fn create(path: PathBuf) -> Result<Self, IoCostError> {
        // A file left by a run that was killed is replaced.
        let _ = std::fs::remove_file(&path);
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            let why = if e == rustix::io::Errno::INVAL {
                std::io::Error::other("the filesystem does not support O_DIRECT")
            } else {
                e.into()
            };
            IoCostError::io(&path, "create", why)
        })?;
        Ok(Scratch { path, fd })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A buffer aligned for `O_DIRECT`.
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Self {
        let raw = vec![fill; len + PAGE];
        let off = raw.as_ptr().align_offset(PAGE).min(PAGE);
        Aligned { raw, off, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Writes `size` bytes sequentially in 1 MiB direct writes (the data must be
/// on the device before reads of it measure anything); stops at `max`.
fn fill(fd: &OwnedFd, size: u64, max: Duration) -> std::io::Result<(u64, Duration)> {
    let mut buf = Aligned::new(BIG, 0x5a);
    let t0 = Instant::now();
    let mut off = 0;
    while off < size && t0.elapsed() < max {
        let n = rustix::io::pwrite(fd.as_fd(), buf.get(), off)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    rustix::fs::fsync(fd.as_fd())?;
    Ok((off / PAGE as u64 * PAGE as u64, t0.elapsed()))
}

#[derive(Debug, Clone, Copy)]
struct Pattern {
    write: bool,
    io: usize,
    random: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    ops: u64,
    bytes: u64,
    took: Duration,
}

impl Rate {
    fn ops_per_sec(&self) -> u64 {
        per_sec(self.ops, self.took)
    }
    fn bytes_per_sec(&self) -> u64 {
        per_sec(self.bytes, self.took)
    }
}

fn per_sec(n: u64, d: Duration) -> u64 {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return n;
    }
    (n as f64 / s).round() as u64
}

/// Runs `depth` threads, each with one IO in flight, for `phase`: sequential
/// threads each walk their own slice of the file, random ones pick
/// IO-aligned offsets anywhere in it.
fn pattern(
    fd: &OwnedFd,
    size: u64,
    p: Pattern,
    depth: usize,
    phase: Duration,
) -> std::io::Result<Rate> {
    let stop = AtomicBool::new(false);
    let slots = size / p.io as u64;
    let slice = (slots / depth as u64).max(1);
    let t0 = Instant::now();
    let results: Vec<std::io::Result<Rate>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..depth)
            .map(|i| {
                let stop = &stop;
                s.spawn(move || -> std::io::Result<Rate> {
                    let mut buf = Aligned::new(p.io, 0xa5);
                    let mut rng =
                        0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1).wrapping_mul(0xff51_afd7);
                    let mut r = Rate::default();
                    let mut k = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let slot = if p.random {
                            xorshift(&mut rng) % slots
                        } else {
                            (i as u64 * slice + k % slice) % slots
                        };
                        k += 1;
                        let off = slot * p.io as u64;
                        let n = if p.write {
                            rustix::io::pwrite(fd.as_fd(), buf.get(), off)?
                        } else {
                            rustix::io::pread(fd.as_fd(), buf.get(), off)?
                        };
                        r.ops += 1;
                        r.bytes += n as u64;
                    }
                    Ok(r)
                })
            })
            .collect();
        std::thread::sleep(phase);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a calibration thread panicked")))
            })
            .collect()
    });
    let took = t0.elapsed();
    let mut total = Rate {
        took,
        ..Rate::default()
    };
    for r in results {
        let r = r?;
        total.ops += r.ops;
        total.bytes += r.bytes;
    }
    Ok(total)
}

/// The 95th percentile latency (µs, at least 1) of 4 KiB random IOs one at a
/// time over `phase`.
fn idle_p95(fd: &OwnedFd, size: u64, write: bool, phase: Duration) -> std::io::Result<u64> {
    let mut buf = Aligned::new(PAGE, 0x3c);
    let slots = (size / PAGE as u64).max(1);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut took: Vec<u64> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < phase || took.len() < 20 {
        let off = (xorshift(&mut rng) % slots) * PAGE as u64;
        let t = Instant::now();
        if write {
            rustix::io::pwrite(fd.as_fd(), buf.get(), off)?;
        } else {
            rustix::io::pread(fd.as_fd(), buf.get(), off)?;
        }
        took.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    Ok(percentile(&mut took, 95).max(1))
}

/// The next of a xorshift64 sequence: random offsets without a dependency.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The `pct`th percentile of `v` (nearest rank; 0 when empty).
fn percentile(v: &mut [u64], pct: usize) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let rank = (v.len() * pct).div_ceil(100).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real calibration on the filesystem of the build directory (a disk on
    /// every machine this runs on; tmpfs has no O_DIRECT and says so).
    #[test]
    fn a_short_calibration_measures_every_coefficient_and_leaves_no_file() {
        let base = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../target"));
        let dir = tempfile::tempdir_in(base).unwrap();
        let plan = CalibrationPlan {
            phase: Duration::from_millis(200),
            file_bytes: 32 << 20,
            ..CalibrationPlan::default()
        };
        match measure(dir.path(), &plan) {
            Ok(m) => {
                println!("{m:?}");
                let c = m.model;
                for (name, v) in [
                    ("rbps", c.rbps),
                    ("rseqiops", c.rseqiops),
                    ("rrandiops", c.rrandiops),
                    ("wbps", c.wbps),
                    ("wseqiops", c.wseqiops),
                    ("wrandiops", c.wrandiops),
                ] {
                    assert!(v > 0, "{name} = 0 in {m:?}");
                }
                // Bandwidth of 1 MiB IOs exceeds what 4 KiB IOs move.
                assert!(c.rbps > c.rrandiops * PAGE as u64, "{m:?}");
                let l = m.idle_latency.expect("idle latency measured");
                // One 4 KiB IO at a time takes about 1/IOPS or more (a queue of 16 adds
                // parallelism, not speed per IO): at least a quarter of it, allowing for
                // noise between the phases, and less than a second.
                for (name, us, iops) in [
                    ("read", l.read_p95_us, c.rrandiops),
                    ("write", l.write_p95_us, c.wrandiops),
                ] {
                    assert!(us < 1_000_000, "{name} p95 {us} µs in {m:?}");
                    assert!(
                        us * iops >= 1_000_000 / 4,
                        "{name} p95 {us} µs against {iops} IOPS"
                    );
                }
                assert_eq!(m.file_bytes, 32 << 20);
            }
            Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "scratch file left: {left:?}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 95), 95);
        assert_eq!(percentile(&mut v, 100), 100);
        assert_eq!(percentile(&mut [7], 95), 7);
        assert_eq!(percentile(&mut [], 95), 0);
    }

    #[test]
    fn a_model_cached_before_idle_latency_still_reads() {
        let old = r#"{"model":{"rbps":1,"rseqiops":2,"rrandiops":3,"wbps":4,"wseqiops":5,"wrandiops":6},"file_bytes":16777216,"took_ms":9}"#;
        let m: Measured = serde_json::from_str(old).unwrap();
        assert_eq!(m.idle_latency, None);
    }

    #[test]
    fn too_little_room_is_refused_with_the_figures() {
        let dir = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")).unwrap();
        let plan = CalibrationPlan {
            file_bytes: 1 << 20,
            ..CalibrationPlan::default()
        };
        let e = measure(dir.path(), &plan).unwrap_err().to_string();
        assert!(e.contains("a calibration needs 16 MiB"), "{e}");
    }
}
