//! Running the network programs on synthetic packets with `BPF_PROG_TEST_RUN`: verdict tests of
//! the token bucket and the per-packet cost benchmark, without attaching anything.
//!
//! The kernel builds the skb with a socket of the *calling* process's v2 cgroup, so register
//! that cgroup ([`crate::cgroup::CgroupRoot::current`]) to exercise the accounting path.

use std::time::Duration;

use aya::programs::{CgroupSkb, TestRun, TestRunOptions};
use serde::Serialize;

use super::{Direction, NetDatapath};
use crate::error::{Error, Result};

/// What the program told the kernel to do with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Transmit / deliver.
    Pass,
    /// Transmit with congestion notification (egress only).
    PassCn,
    /// Drop.
    Drop,
    /// Drop with congestion notification (egress only).
    DropCn,
}

impl Verdict {
    /// Decodes a cgroup_skb return value (bit 0: pass, bit 1: congestion notification).
    pub fn from_return(value: u32) -> Self {
        match value & 3 {
            0 => Self::Drop,
            1 => Self::Pass,
            2 => Self::DropCn,
            _ => Self::PassCn,
        }
    }

    /// Whether the packet goes through.
    pub fn passes(self) -> bool {
        matches!(self, Self::Pass | Self::PassCn)
    }
}

/// Result of one `BPF_PROG_TEST_RUN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TestRunOutcome {
    /// Verdict of the last run.
    pub verdict: Verdict,
    /// Average duration of one run as reported by the kernel.
    pub per_run: Duration,
}

impl NetDatapath {
    /// Runs the program of `dir` on `packet` (an Ethernet frame, see [`ipv4_tcp_packet`])
    /// `repeat` times. The program sees `skb->len` = frame length - 14.
    pub fn test_run(&self, dir: Direction, packet: &[u8], repeat: u32) -> Result<TestRunOutcome> {
        run_program(self.program(dir), packet, repeat, dir.as_str())
    }

    /// Like [`NetDatapath::test_run`] once, also returning the packet as the program left it
    /// (e.g. with ECN CE set).
    pub fn test_run_output(
        &self,
        dir: Direction,
        packet: &[u8],
    ) -> Result<(TestRunOutcome, Vec<u8>)> {
        let mut out = vec![0u8; packet.len() + 256];
        let opts = TestRunOptions {
            data_in: Some(packet),
            data_out: Some(&mut out),
            ..TestRunOptions::new()
        };
        let result = self
            .program(dir)
            .test_run(opts)
            .map_err(|e| Error::program(dir.as_str(), "BPF_PROG_TEST_RUN", e))?;
        out.truncate(usize::try_from(result.data_size_out).unwrap_or(0));
        Ok((
            TestRunOutcome {
                verdict: Verdict::from_return(result.return_value),
                per_run: result.duration,
            },
            out,
        ))
    }
}

/// Runs a cgroup_skb program `repeat` times on `packet`.
pub fn run_program(
    prog: &CgroupSkb,
    packet: &[u8],
    repeat: u32,
    name: &str,
) -> Result<TestRunOutcome> {
    let opts = TestRunOptions {
        data_in: Some(packet),
        repeat: repeat.max(1),
        ..TestRunOptions::new()
    };
    let result = prog
        .test_run(opts)
        .map_err(|e| Error::program(name, "BPF_PROG_TEST_RUN", e))?;
    Ok(TestRunOutcome {
        verdict: Verdict::from_return(result.return_value),
        per_run: result.duration,
    })
}

/// An Ethernet + IPv4 + TCP frame carrying `payload` bytes (zeros), the input
/// `BPF_PROG_TEST_RUN` expects for cgroup_skb programs. `ect` sets ECN-capable transport.
pub fn ipv4_tcp_packet(payload: usize, ect: bool) -> Vec<u8> {
    let ip_len = 20 + 20 + payload;
    let mut p = Vec::with_capacity(14 + ip_len);
    p.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00]); // dst, src, IPv4
    let total = u16::try_from(ip_len).unwrap_or(u16::MAX);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[1] = if ect { 0x02 } else { 0 }; // ECT(0)
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64; // ttl
    ip[9] = 6; // tcp
    ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[127, 0, 0, 1]);
    let csum = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    p.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // PSH|ACK
    p.extend_from_slice(&tcp);
    p.resize(14 + ip_len, 0);
    p
}

fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_decode_the_cgroup_skb_return_bits() {
        assert_eq!(Verdict::from_return(0), Verdict::Drop);
        assert_eq!(Verdict::from_return(1), Verdict::Pass);
        assert_eq!(Verdict::from_return(2), Verdict::DropCn);
        assert_eq!(Verdict::from_return(3), Verdict::PassCn);
        assert!(Verdict::PassCn.passes() && !Verdict::DropCn.passes());
    }

    #[test]
    fn packet_has_valid_ipv4_header() {
        let p = ipv4_tcp_packet(1000, true);
        assert_eq!(p.len(), 14 + 20 + 20 + 1000);
        assert_eq!(u16::from_be_bytes([p[16], p[17]]), 1040);
        assert_eq!(
            ip_checksum(&p[14..34]),
            0,
            "checksum over a valid header folds to zero"
        );
        assert_eq!(p[15] & 3, 2, "ECT(0)");
    }
}
