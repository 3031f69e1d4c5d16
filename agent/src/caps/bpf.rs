//! eBPF probes: load a 2-instruction program through `bpf(2)` and look for BTF,
//! bpffs, the JIT and kprobes.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::model::caps::Feature;

const BPF_PROG_LOAD: libc::c_long = 5;
/// `BPF_PROG_TYPE_SOCKET_FILTER`.
pub const PROG_SOCKET_FILTER: u32 = 1;
/// `BPF_PROG_TYPE_CGROUP_SKB`.
pub const PROG_CGROUP_SKB: u32 = 8;

/// The leading fields of `union bpf_attr` used by `BPF_PROG_LOAD`; the kernel
/// zero-extends a shorter attribute.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Loads `r0 = 1; exit` as a program of `prog_type` and closes it again.
pub fn try_load(prog_type: u32) -> io::Result<()> {
    // mov64 r0, 1 (opcode 0xb7, imm 1) ; exit (opcode 0x95)
    let insns: [u64; 2] = [0x0000_0001_0000_00b7, 0x0000_0000_0000_0095];
    let license = b"GPL\0";
    let attr = ProgLoadAttr {
        prog_type,
        insn_cnt: 2,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..ProgLoadAttr::default()
    };
    // SAFETY: `attr` is a valid, fully initialised prefix of `union bpf_attr` for
    // BPF_PROG_LOAD; the pointers inside it reference `insns` and `license`, which
    // outlive the call; the size passed is the size of `attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoadAttr,
            std::mem::size_of::<ProgLoadAttr>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd =
        i32::try_from(fd).map_err(|_| io::Error::other("bpf(2) returned an out-of-range fd"))?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

fn explain(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) => format!("{e} (needs CAP_BPF or CAP_SYS_ADMIN)"),
        Some(libc::ENOSYS) => format!("{e} (kernel built without CONFIG_BPF_SYSCALL)"),
        Some(libc::EINVAL) => format!("{e} (program type not supported by this kernel)"),
        _ => e.to_string(),
    }
}

/// `bpf(2)` works for a socket filter.
pub fn syscall() -> Feature {
    match try_load(PROG_SOCKET_FILTER) {
        Ok(()) => Feature::yes("bpf(2) loaded a test socket filter"),
        Err(e) => Feature::no(format!("bpf(2) BPF_PROG_LOAD failed: {}", explain(&e))),
    }
}

/// A `cgroup_skb` program loads.
pub fn cgroup_skb() -> Feature {
    match try_load(PROG_CGROUP_SKB) {
        Ok(()) => Feature::yes("a test cgroup_skb program loaded"),
        Err(e) => Feature::no(format!("cgroup_skb program load failed: {}", explain(&e))),
    }
}

/// Kernel BTF.
pub fn btf() -> Feature {
    let p = Path::new("/sys/kernel/btf/vmlinux");
    match std::fs::metadata(p) {
        Ok(m) => Feature::yes(format!("{} ({} bytes)", p.display(), m.len())),
        Err(e) => Feature::no(format!(
            "{}: {e} (kernel without CONFIG_DEBUG_INFO_BTF; CO-RE programs cannot load)",
            p.display()
        )),
    }
}

/// bpffs at `/sys/fs/bpf`, from mountinfo text.
pub fn bpffs(mountinfo: &str) -> Feature {
    let mounted = mountinfo.lines().any(|l| {
        let Some((left, right)) = l.split_once(" - ") else {
            return false;
        };
        left.split(' ').nth(4) == Some("/sys/fs/bpf") && right.starts_with("bpf ")
    });
    if mounted {
        Feature::yes("bpffs mounted at /sys/fs/bpf")
    } else {
        Feature::no("bpffs not mounted at /sys/fs/bpf (the agent mounts it when it pins programs)")
    }
}

/// The BPF JIT.
pub fn jit() -> Feature {
    match std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable") {
        Ok(v) if v.trim() == "0" => {
            Feature::no("net.core.bpf_jit_enable = 0 (programs run in the interpreter)")
        }
        Ok(v) => Feature::yes(format!("net.core.bpf_jit_enable = {}", v.trim())),
        Err(e) => Feature::no(format!("/proc/sys/net/core/bpf_jit_enable: {e}")),
    }
}

/// kprobe perf events.
pub fn kprobes() -> Feature {
    let p = Path::new("/sys/bus/event_source/devices/kprobe");
    if p.exists() {
        Feature::yes(format!("{} present", p.display()))
    } else {
        Feature::no(format!(
            "{} absent (kernel without CONFIG_KPROBES); use tracepoints and tp_btf",
            p.display()
        ))
    }
}

/// Capabilities relevant to the agent that the process holds.
pub fn held_capabilities(status: &str) -> Vec<String> {
    const CAPS: &[(u32, &str)] = &[
        (1, "CAP_DAC_OVERRIDE"),
        (12, "CAP_NET_ADMIN"),
        (21, "CAP_SYS_ADMIN"),
        (24, "CAP_SYS_RESOURCE"),
        (38, "CAP_PERFMON"),
        (39, "CAP_BPF"),
    ];
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    CAPS.iter()
        .filter(|(bit, _)| eff & (1u64 << bit) != 0)
        .map(|(_, n)| (*n).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits() {
        // CapEff of the development hosts: everything but CAP_SYS_RESOURCE.
        let caps = held_capabilities("Name:\tx\nCapEff:\t000001fffeffffff\n");
        assert!(caps.contains(&"CAP_BPF".to_string()));
        assert!(!caps.contains(&"CAP_SYS_RESOURCE".to_string()));
        assert!(held_capabilities("CapEff:\t0000000000000000\n").is_empty());
    }

    #[test]
    fn bpffs_detection() {
        assert!(bpffs("26 21 0:23 / /sys/fs/bpf rw,nosuid - bpf bpf rw,mode=700\n").available);
        assert!(!bpffs("41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n").available);
    }

    #[test]
    fn probe_matches_privilege() {
        // Root with CAP_BPF/CAP_SYS_ADMIN must load; otherwise the reason says why.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caps = held_capabilities(&status);
        let f = syscall();
        if caps.iter().any(|c| c == "CAP_BPF" || c == "CAP_SYS_ADMIN") {
            assert!(f.available, "{}", f.detail);
        } else {
            assert!(f.detail.contains("BPF_PROG_LOAD"), "{}", f.detail);
        }
    }
}
