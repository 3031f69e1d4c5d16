//! Confinement of a process workload, prepared by the shim before it forks
//! the workload (so that the child only makes plain system calls): the
//! capability bounding set to keep, the seccomp programs to install, and a
//! Landlock ruleset that makes the filesystem read-only except the
//! workload's writable paths. What each enforces comes from the
//! [`SecurityContext`] admission resolved (docs/security.md).

use daros_coordinator::model::security::{SeccompProfile, SecurityContext};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Highest capability number this build knows (`CAP_CHECKPOINT_RESTORE`).
pub const LAST_CAP: u32 = 40;

/// System calls RuntimeDefault refuses with EPERM: loading kernel code,
/// mounting, namespaces, tracing other processes, BPF and perf, keyrings,
/// the clock, swap, reboot, accounting and quotas.
const REFUSED: &[i64] = &[
    libc::SYS_acct,
    libc::SYS_add_key,
    libc::SYS_bpf,
    libc::SYS_clock_adjtime,
    libc::SYS_clock_settime,
    libc::SYS_delete_module,
    libc::SYS_finit_module,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fsopen,
    libc::SYS_fspick,
    libc::SYS_init_module,
    libc::SYS_kcmp,
    libc::SYS_kexec_file_load,
    libc::SYS_kexec_load,
    libc::SYS_keyctl,
    libc::SYS_mount,
    libc::SYS_move_mount,
    libc::SYS_open_by_handle_at,
    libc::SYS_open_tree,
    libc::SYS_perf_event_open,
    libc::SYS_pivot_root,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_ptrace,
    libc::SYS_quotactl,
    libc::SYS_reboot,
    libc::SYS_request_key,
    libc::SYS_setns,
    libc::SYS_settimeofday,
    libc::SYS_swapoff,
    libc::SYS_swapon,
    libc::SYS_umount2,
    libc::SYS_unshare,
    libc::SYS_userfaultfd,
];

/// `clone` flags that create namespaces: refused like `unshare`.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn arch() -> io::Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| io::Error::other(format!("seccomp on {}: {e:?}", std::env::consts::ARCH)))
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    matched: SeccompAction,
) -> io::Result<BpfProgram> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, matched, arch()?)
        .map_err(|e| io::Error::other(format!("seccomp filter: {e}")))?;
    BpfProgram::try_from(filter).map_err(|e| io::Error::other(format!("seccomp program: {e}")))
}

/// The RuntimeDefault programs: refused calls fail with EPERM; `clone3`
/// (whose flags a filter cannot read) fails with ENOSYS, so that the C
/// library falls back to `clone`, whose namespace flags are refused.
pub fn runtime_default() -> io::Result<Vec<BpfProgram>> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&s| (s, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&f| {
            SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)
                .and_then(|c| SeccompRule::new(vec![c]))
                .map_err(|e| io::Error::other(format!("seccomp rule: {e}")))
        })
        .collect::<io::Result<Vec<_>>>()?;
    refused.insert(libc::SYS_clone, clone_rules);
    let eperm = program(refused, SeccompAction::Errno(libc::EPERM as u32))?;
    let clone3 = program(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Errno(libc::ENOSYS as u32),
    )?;
    Ok(vec![eperm, clone3])
}

/// Bit mask of the capabilities `ctx` keeps (every one when privileged).
pub fn kept_capabilities(ctx: &SecurityContext) -> u64 {
    if ctx.privileged {
        return u64::MAX;
    }
    ctx.capabilities
        .iter()
        .map(|c| c.number())
        .filter(|&n| n <= LAST_CAP)
        .fold(0, |m, n| m | (1 << n))
}

/// Device files every workload may still write with a read-only root.
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// A Landlock ruleset (its fd, for `landlock_restrict_self` in the child)
/// under which only `paths` (created when missing, owned by `owner`) and a
/// few devices are writable; `Ok(None)` where the kernel has no Landlock.
pub fn read_only_except(
    paths: &[String],
    owner: Option<(u32, u32)>,
) -> io::Result<Option<OwnedFd>> {
    use landlock::{ABI, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr};
    let abi = ABI::V5;
    let write = AccessFs::from_write(abi);
    let err = |what: &str, e: &dyn std::fmt::Display| io::Error::other(format!("{what}: {e}"));
    let mut rs = Ruleset::default()
        .handle_access(write)
        .map_err(|e| err("landlock ruleset", &e))?
        .create()
        .map_err(|e| err("landlock ruleset", &e))?;
    for p in paths {
        let path = Path::new(p);
        if !path.exists() {
            std::fs::create_dir_all(path)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
            }
        }
        let fd = PathFd::new(path).map_err(|e| err(&format!("writable path {p}"), &e))?;
        rs = rs
            .add_rule(PathBeneath::new(fd, write))
            .map_err(|e| err(&format!("writable path {p}"), &e))?;
    }
    for d in WRITABLE_DEVICES {
        if let Ok(fd) = PathFd::new(d) {
            let file_write = AccessFs::WriteFile | AccessFs::Truncate;
            rs = rs
                .add_rule(PathBeneath::new(fd, file_write))
                .map_err(|e| err(d, &e))?;
        }
    }
    Ok(Option::<OwnedFd>::from(rs))
}

/// Everything the child needs, prepared from `ctx`.
#[derive(Debug, Default)]
pub struct Confinement {
    /// Capabilities kept in the bounding set.
    pub keep_caps: Option<u64>,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: bool,
    /// Landlock ruleset to restrict itself with.
    pub landlock: Option<OwnedFd>,
    /// Seccomp programs to install, in order.
    pub seccomp: Vec<BpfProgram>,
}

impl Confinement {
    /// Prepares the confinement of `ctx` for a workload run by `owner`.
    pub fn prepare(ctx: &SecurityContext, owner: Option<(u32, u32)>) -> io::Result<Self> {
        let landlock = match &ctx.writable_paths {
            Some(p) => {
                let fd = read_only_except(p, owner)?;
                if fd.is_none() {
                    return Err(io::Error::other(
                        "a read-only root needs Landlock, which this kernel does not offer",
                    ));
                }
                fd
            }
            None => None,
        };
        Ok(Self {
            keep_caps: (!ctx.privileged).then(|| kept_capabilities(ctx)),
            // Landlock needs no_new_privs for a process without CAP_SYS_ADMIN.
            no_new_privs: ctx.no_new_privileges || landlock.is_some(),
            landlock,
            seccomp: match ctx.seccomp {
                SeccompProfile::RuntimeDefault if !ctx.privileged => runtime_default()?,
                _ => Vec::new(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::model::security::Capability;

    #[test]
    fn capability_mask_and_programs() {
        let mut ctx = SecurityContext {
            capabilities: vec![
                Capability::try_from("NET_BIND_SERVICE".to_string()).unwrap(),
                Capability::try_from("CHOWN".to_string()).unwrap(),
            ],
            ..SecurityContext::default()
        };
        assert_eq!(kept_capabilities(&ctx), (1 << 10) | 1);
        ctx.privileged = true;
        assert_eq!(kept_capabilities(&ctx), u64::MAX);
        let progs = runtime_default().unwrap();
        assert_eq!(progs.len(), 2);
        assert!(
            progs[0].len() > REFUSED.len(),
            "one jump per refused call at least"
        );
    }
}
