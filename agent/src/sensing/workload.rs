//! One tracked workload: its open stat files, the previous counters, and the
//! conversion of raw counters into a [`WorkloadSample`] with rates.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::cgroup::stats::{CgroupStats, Throttling};
use crate::cgroup::{CgroupError, StatsReader};
use crate::model::workload::{
    CpuSample, IoDeviceSample, MemoryEventsSample, MemorySample, ThrottlingSample, WorkloadSample,
};

use super::devices::DeviceNames;
use super::discovery::Discovered;
use super::rate::{Counter, ratio};

#[derive(Debug, Default)]
struct IoPrev {
    major: u32,
    minor: u32,
    rbytes: Counter,
    wbytes: Counter,
    rios: Counter,
    wios: Counter,
}

/// Previous counters of one workload.
#[derive(Debug, Default)]
struct Prev {
    cpu: Counter,
    throttling: Option<Throttling>,
    io: Vec<IoPrev>,
}

/// A workload being sampled.
#[derive(Debug)]
pub struct Tracked {
    /// What discovery found.
    pub info: Discovered,
    /// Directories per hierarchy.
    pub paths: Vec<String>,
    /// Inode of the primary directory; a new inode means the cgroup was recreated.
    pub inode: Option<u64>,
    reader: StatsReader,
    raw: CgroupStats,
    prev: Prev,
    /// Set once a read error was logged, cleared on success (rate-limits logs).
    pub error_logged: bool,
}

impl Tracked {
    /// Starts tracking with an opened reader.
    pub fn new(
        info: Discovered,
        paths: Vec<String>,
        inode: Option<u64>,
        reader: StatsReader,
    ) -> Self {
        Tracked {
            info,
            paths,
            inode,
            reader,
            raw: CgroupStats::default(),
            prev: Prev::default(),
            error_logged: false,
        }
    }

    /// Reads the counters and builds the sample; rates are relative to the
    /// previous successful read.
    pub fn sample(
        &mut self,
        buf: &mut Vec<u8>,
        names: &mut DeviceNames,
    ) -> Result<WorkloadSample, CgroupError> {
        let at = Instant::now();
        self.reader.read(buf, &mut self.raw)?;
        Ok(build(
            &self.raw,
            &mut self.prev,
            at,
            names,
            self.reader.unavailable(),
        ))
    }
}

fn build(
    raw: &CgroupStats,
    prev: &mut Prev,
    at: Instant,
    names: &mut DeviceNames,
    unavailable: &[(&'static str, String)],
) -> WorkloadSample {
    let cpu = raw.cpu.map(|c| {
        let cores = prev
            .cpu
            .update(c.usage_ns, at)
            .map(|ns_per_s| ns_per_s / 1e9);
        let throttling = c.throttling.map(|t| {
            let r = prev.throttling.and_then(|p| {
                ratio(
                    p.throttled_periods,
                    t.throttled_periods,
                    p.periods,
                    t.periods,
                )
            });
            ThrottlingSample {
                periods_total: t.periods,
                throttled_periods_total: t.throttled_periods,
                throttled_seconds_total: t.throttled_ns as f64 / 1e9,
                throttled_ratio: r,
            }
        });
        prev.throttling = c.throttling;
        CpuSample {
            usage_seconds_total: c.usage_ns as f64 / 1e9,
            user_seconds_total: c.user_ns.map(|v| v as f64 / 1e9),
            system_seconds_total: c.system_ns.map(|v| v as f64 / 1e9),
            usage_cores: cores,
            throttling,
        }
    });
    let memory = raw.memory.map(|m| MemorySample {
        current_bytes: m.current,
        anon_bytes: m.anon,
        file_bytes: m.file,
        events: MemoryEventsSample {
            low: m.events.low,
            high: m.events.high,
            max: m.events.max,
            oom: m.events.oom,
            oom_kill: m.events.oom_kill,
        },
    });
    let io = raw.io.as_ref().map(|devs| {
        let mut out = Vec::with_capacity(devs.len());
        for d in devs {
            let idx = match prev
                .io
                .iter()
                .position(|p| p.major == d.major && p.minor == d.minor)
            {
                Some(i) => i,
                None => {
                    prev.io.push(IoPrev {
                        major: d.major,
                        minor: d.minor,
                        ..IoPrev::default()
                    });
                    prev.io.len() - 1
                }
            };
            let p = &mut prev.io[idx];
            out.push(IoDeviceSample {
                dev: format!("{}:{}", d.major, d.minor),
                device: names.name(d.major, d.minor),
                read_bytes_total: d.rbytes,
                write_bytes_total: d.wbytes,
                reads_total: d.rios,
                writes_total: d.wios,
                discard_bytes_total: d.dbytes,
                read_bytes_per_second: p.rbytes.update(d.rbytes, at),
                write_bytes_per_second: p.wbytes.update(d.wbytes, at),
                reads_per_second: p.rios.update(d.rios, at),
                writes_per_second: p.wios.update(d.wios, at),
            });
        }
        prev.io.retain(|p| {
            devs.iter()
                .any(|d| d.major == p.major && d.minor == p.minor)
        });
        out
    });
    let psi = crate::model::PsiSample {
        cpu: raw.psi.cpu.map(Into::into),
        memory: raw.psi.memory.map(Into::into),
        io: raw.psi.io.map(Into::into),
    };
    WorkloadSample {
        cpu,
        memory,
        io,
        pids: raw.pids,
        psi,
        gpu_memory_bytes: None,
        network: None,
        runqueue: None,
        unavailable: unavailable
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::stats::{CpuStats, IoStats};
    use std::time::Duration;

    #[test]
    fn rates_reset_when_counters_go_back() {
        let mut prev = Prev::default();
        let mut names = DeviceNames::default();
        let t0 = Instant::now();
        let mut raw = CgroupStats {
            cpu: Some(CpuStats {
                usage_ns: 5_000_000_000,
                throttling: Some(Throttling {
                    periods: 100,
                    throttled_periods: 10,
                    throttled_ns: 0,
                }),
                ..CpuStats::default()
            }),
            io: Some(vec![IoStats {
                major: 254,
                minor: 0,
                wbytes: 1000,
                ..IoStats::default()
            }]),
            ..CgroupStats::default()
        };
        let s = build(&raw, &mut prev, t0, &mut names, &[]);
        assert_eq!(s.cpu.as_ref().unwrap().usage_cores, None);

        raw.cpu.as_mut().unwrap().usage_ns = 6_000_000_000;
        raw.cpu.as_mut().unwrap().throttling = Some(Throttling {
            periods: 110,
            throttled_periods: 15,
            throttled_ns: 0,
        });
        raw.io.as_mut().unwrap()[0].wbytes = 3000;
        let s = build(
            &raw,
            &mut prev,
            t0 + Duration::from_secs(2),
            &mut names,
            &[],
        );
        let cpu = s.cpu.unwrap();
        assert!((cpu.usage_cores.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(cpu.throttling.unwrap().throttled_ratio, Some(0.5));
        assert_eq!(
            s.io.as_ref().unwrap()[0].write_bytes_per_second,
            Some(1000.0)
        );

        // cgroup recreated with the same name: every counter smaller
        raw.cpu.as_mut().unwrap().usage_ns = 1_000;
        raw.cpu.as_mut().unwrap().throttling = Some(Throttling::default());
        raw.io.as_mut().unwrap()[0].wbytes = 10;
        let s = build(
            &raw,
            &mut prev,
            t0 + Duration::from_secs(3),
            &mut names,
            &[],
        );
        let cpu = s.cpu.unwrap();
        assert_eq!(cpu.usage_cores, None);
        assert_eq!(cpu.throttling.unwrap().throttled_ratio, None);
        assert_eq!(s.io.unwrap()[0].write_bytes_per_second, None);
    }
}
