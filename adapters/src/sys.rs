//! The few places that must call the C library directly: the set-up a
//! forked child does before exec (join cgroups, drop privileges, die with
//! its shim), a signalfd for the shim, and user/group lookups through NSS.
//! Everything else uses `rustix`.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Steps of [`ChildSetup::run`], reported one byte each through a pipe so
/// that the parent can say which step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// Writing the process into each `cgroup.procs`.
    JoinCgroup = 1,
    /// Writing `/proc/self/oom_score_adj`.
    OomScoreAdj = 2,
    /// `setgroups`.
    Groups = 3,
    /// `setgid`.
    Gid = 4,
    /// `setuid`.
    Uid = 5,
    /// `PR_SET_PDEATHSIG` and the parent check.
    ParentDeath = 6,
    /// `chdir` to the working directory.
    Chdir = 7,
    /// `execve` of the program.
    Exec = 8,
    /// Dropping capabilities from the bounding set.
    Capabilities = 9,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 10,
    /// `landlock_restrict_self` (read-only filesystem but writable paths).
    Landlock = 11,
    /// Installing the seccomp filter.
    Seccomp = 12,
}

impl Stage {
    /// The stage a reported byte stands for.
    pub fn from_byte(b: u8) -> Option<Stage> {
        Some(match b {
            1 => Stage::JoinCgroup,
            2 => Stage::OomScoreAdj,
            3 => Stage::Groups,
            4 => Stage::Gid,
            5 => Stage::Uid,
            6 => Stage::ParentDeath,
            7 => Stage::Chdir,
            8 => Stage::Exec,
            9 => Stage::Capabilities,
            10 => Stage::NoNewPrivs,
            11 => Stage::Landlock,
            12 => Stage::Seccomp,
            _ => return None,
        })
    }

    /// Words for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::JoinCgroup => "join cgroup",
            Stage::OomScoreAdj => "set oom_score_adj",
            Stage::Groups => "set supplementary groups",
            Stage::Gid => "set group",
            Stage::Uid => "set user",
            Stage::ParentDeath => "tie to shim",
            Stage::Chdir => "change to working directory",
            Stage::Exec => "exec",
            Stage::Capabilities => "drop capabilities",
            Stage::NoNewPrivs => "set no_new_privs",
            Stage::Landlock => "restrict the filesystem (Landlock)",
            Stage::Seccomp => "install the seccomp filter",
        }
    }
}

/// What a child does between fork and exec, prepared (allocated) before
/// the fork so that [`ChildSetup::run`] only makes async-signal-safe calls.
#[derive(Debug, Default, Clone)]
pub struct ChildSetup {
    /// `cgroup.procs` files to write "0" (= this process) into.
    pub cgroup_procs: Vec<CString>,
    /// Value for `/proc/self/oom_score_adj`.
    pub oom_score_adj: Option<i32>,
    /// Supplementary groups (set only when changing user).
    pub groups: Vec<u32>,
    /// Group to switch to.
    pub gid: Option<u32>,
    /// User to switch to.
    pub uid: Option<u32>,
    /// Directory to change to (after the user switch, so it is checked with
    /// the user's rights).
    pub cwd: Option<CString>,
    /// Pid of the parent; when set, the child is killed if it dies.
    pub die_with_parent: Option<i32>,
    /// Write end of the stage pipe (close-on-exec).
    pub stage_fd: Option<RawFd>,
    /// Capabilities kept in the bounding set (bit n = capability n); the
    /// others are dropped. `None`: the bounding set is left as it is.
    pub keep_caps: Option<u64>,
    /// Set `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: bool,
    /// Landlock ruleset to restrict itself with.
    pub landlock_fd: Option<RawFd>,
    /// Seccomp programs to install, in order (last step before exec).
    pub seccomp: Vec<seccompiler::BpfProgram>,
}

impl ChildSetup {
    /// Runs in the forked child before exec.
    fn run(&self) -> io::Result<()> {
        self.stage(Stage::JoinCgroup);
        for p in &self.cgroup_procs {
            write_file(p, b"0")?;
        }
        if let Some(v) = self.oom_score_adj {
            self.stage(Stage::OomScoreAdj);
            let mut buf = [0u8; 12];
            let n = format_i32(v, &mut buf);
            write_file(c"/proc/self/oom_score_adj", &buf[..n])?;
        }
        if let Some(keep) = self.keep_caps {
            // Before the user switch: dropping needs CAP_SETPCAP.
            self.stage(Stage::Capabilities);
            for cap in 0..=crate::process::confine::LAST_CAP {
                if keep & (1 << cap) == 0 {
                    // SAFETY: plain prctl with integer arguments.
                    let r = unsafe {
                        libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0)
                    };
                    // A capability this kernel does not know is not there.
                    if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
        }
        if self.uid.is_some() || self.gid.is_some() {
            self.stage(Stage::Groups);
            // SAFETY: the pointer and length describe `self.groups`.
            check(unsafe { libc::setgroups(self.groups.len(), self.groups.as_ptr()) })?;
        }
        if let Some(g) = self.gid {
            self.stage(Stage::Gid);
            // SAFETY: plain syscall wrapper.
            check(unsafe { libc::setgid(g) })?;
        }
        if let Some(u) = self.uid {
            self.stage(Stage::Uid);
            // SAFETY: plain syscall wrapper.
            check(unsafe { libc::setuid(u) })?;
        }
        if let Some(parent) = self.die_with_parent {
            // After the user switch: changing credentials clears it.
            self.stage(Stage::ParentDeath);
            // SAFETY: plain prctl with integer arguments.
            check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
            // SAFETY: plain syscall wrapper.
            if unsafe { libc::getppid() } != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        if let Some(cwd) = &self.cwd {
            self.stage(Stage::Chdir);
            // SAFETY: `cwd` is a valid NUL-terminated string.
            check(unsafe { libc::chdir(cwd.as_ptr()) })?;
        }
        if self.no_new_privs {
            self.stage(Stage::NoNewPrivs);
            // SAFETY: plain prctl with integer arguments.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        }
        if let Some(fd) = self.landlock_fd {
            self.stage(Stage::Landlock);
            // SAFETY: plain system call with an fd and a flags word.
            let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) };
            check(i32::try_from(r).unwrap_or(-1))?;
        }
        for prog in &self.seccomp {
            self.stage(Stage::Seccomp);
            let fprog = libc::sock_fprog {
                len: u16::try_from(prog.len()).unwrap_or(u16::MAX),
                // seccompiler's sock_filter is repr(C) with the kernel's layout.
                filter: prog.as_ptr().cast::<libc::sock_filter>().cast_mut(),
            };
            // SAFETY: `fprog` points at a live program for the duration of the call.
            check(unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                    &fprog as *const libc::sock_fprog as libc::c_ulong,
                    0,
                    0,
                )
            })?;
        }
        // The shim blocks signals for its signalfd; the workload must not
        // inherit that mask.
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set it is given.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        // SAFETY: `set` was initialised just above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut()) };
        self.stage(Stage::Exec);
        Ok(())
    }

    fn stage(&self, s: Stage) {
        if let Some(fd) = self.stage_fd {
            let b = [s as u8];
            // SAFETY: writes one byte from a live buffer; errors are ignored
            // (the stage report is best effort).
            unsafe { libc::write(fd, b.as_ptr().cast(), 1) };
        }
    }

    /// Makes `cmd` run this set-up in its child before exec.
    pub fn install_std(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: `run` only makes async-signal-safe calls (open, write,
        // close, setgroups, setgid, setuid, prctl, getppid, chdir,
        // sigprocmask) on data allocated before the fork.
        unsafe { cmd.pre_exec(move || self.run()) };
    }

    /// Same as [`Self::install_std`] for a tokio command.
    pub fn install_tokio(self, cmd: &mut tokio::process::Command) {
        // SAFETY: as in `install_std`.
        unsafe { cmd.pre_exec(move || self.run()) };
    }
}

/// A pipe whose write end a child reports [`Stage`]s into.
#[derive(Debug)]
pub struct StagePipe {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

impl StagePipe {
    /// A new close-on-exec pipe.
    pub fn new() -> io::Result<Self> {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        Ok(Self {
            read: r,
            write: Some(w),
        })
    }

    /// The write end for [`ChildSetup::stage_fd`].
    pub fn write_fd(&self) -> Option<RawFd> {
        self.write.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// After the spawn returned: closes the write end and returns the last
    /// stage the child reached (its exec or its exit closed its end).
    pub fn last_stage(mut self) -> Option<Stage> {
        self.write = None;
        let mut last = None;
        let mut buf = [0u8; 32];
        while let Ok(n) = rustix::io::read(&self.read, &mut buf) {
            if n == 0 {
                break;
            }
            last = buf[..n]
                .iter()
                .rev()
                .find_map(|b| Stage::from_byte(*b))
                .or(last);
        }
        last
    }
}

fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the flags are constants.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    // SAFETY: `data` is a live buffer of `data.len()` bytes.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    if n < 0 {
        return Err(err);
    }
    Ok(())
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn format_i32(v: i32, buf: &mut [u8; 12]) -> usize {
    let mut n = i64::from(v).unsigned_abs();
    let mut tmp = [0u8; 12];
    let mut len = 0;
    loop {
        tmp[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut out = 0;
    if v < 0 {
        buf[0] = b'-';
        out = 1;
    }
    for i in (0..len).rev() {
        buf[out] = tmp[i];
        out += 1;
    }
    out
}

/// Makes descriptor `target` (0, 1 or 2) a duplicate of `src`.
pub fn dup_onto(src: &impl AsRawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on two descriptors this process holds; `target` is a
    // standard stream the caller means to replace.
    check(unsafe { libc::dup2(src.as_raw_fd(), target) })
}

/// Registers an owned descriptor with tokio's reactor for readability.
pub fn async_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open descriptor that nothing else
    // closes or replaces while the `AsyncFd` owns it.
    let r = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    r.map_err(io::Error::from)
}

/// A signalfd for a set of signals, which are blocked for normal delivery.
#[derive(Debug)]
pub struct SignalFd(OwnedFd);

impl SignalFd {
    /// Blocks `signals` in this (single-threaded) process and opens a
    /// non-blocking signalfd for them.
    pub fn block_and_open(signals: &[i32]) -> io::Result<Self> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        for s in signals {
            // SAFETY: the set was initialised above.
            check(unsafe { libc::sigaddset(set.as_mut_ptr(), *s) })?;
        }
        // SAFETY: the set is initialised.
        let r =
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        // SAFETY: the set is initialised; -1 asks for a new fd.
        let fd =
            unsafe { libc::signalfd(-1, set.as_ptr(), libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        check(fd)?;
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The next pending signal number, if any.
    pub fn read(&self) -> io::Result<Option<i32>> {
        let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into `info`.
        let n = unsafe { libc::read(self.0.as_raw_fd(), info.as_mut_ptr().cast(), size) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if usize::try_from(n).ok() != Some(size) {
            return Ok(None);
        }
        // SAFETY: the kernel filled the whole struct.
        let info = unsafe { info.assume_init() };
        Ok(i32::try_from(info.ssi_signo).ok())
    }
}

impl AsRawFd for SignalFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl std::os::fd::AsFd for SignalFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.0)
    }
}

/// A user account from NSS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: String,
}

fn nss_buf() -> Vec<libc::c_char> {
    vec![0; 16 * 1024]
}

/// Looks a user up by name (`None` when unknown).
pub fn user_by_name(name: &str) -> io::Result<Option<Account>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    lookup_user(|pw, buf, res| {
        // SAFETY: every pointer is valid for the call; `buf` has `buf.len()` bytes.
        unsafe { libc::getpwnam_r(cname.as_ptr(), pw, buf.as_mut_ptr(), buf.len(), res) }
    })
}

/// Looks a user up by id (`None` when unknown).
pub fn user_by_uid(uid: u32) -> io::Result<Option<Account>> {
    lookup_user(|pw, buf, res| {
        // SAFETY: every pointer is valid for the call; `buf` has `buf.len()` bytes.
        unsafe { libc::getpwuid_r(uid, pw, buf.as_mut_ptr(), buf.len(), res) }
    })
}

fn lookup_user(
    mut call: impl FnMut(*mut libc::passwd, &mut [libc::c_char], *mut *mut libc::passwd) -> libc::c_int,
) -> io::Result<Option<Account>> {
    let mut buf = nss_buf();
    loop {
        let mut pw = MaybeUninit::<libc::passwd>::uninit();
        let mut res: *mut libc::passwd = std::ptr::null_mut();
        let r = call(pw.as_mut_ptr(), &mut buf, &mut res);
        if r == libc::ERANGE && buf.len() < 1 << 20 {
            buf = vec![0; buf.len() * 4];
            continue;
        }
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        if res.is_null() {
            return Ok(None);
        }
        // SAFETY: on success with a non-null result, `pw` is initialised and
        // its strings point into `buf`, alive here.
        let pw = unsafe { pw.assume_init() };
        // SAFETY: NSS returns NUL-terminated strings.
        let (name, home) = unsafe {
            (
                CStr::from_ptr(pw.pw_name).to_string_lossy().into_owned(),
                if pw.pw_dir.is_null() {
                    String::from("/")
                } else {
                    CStr::from_ptr(pw.pw_dir).to_string_lossy().into_owned()
                },
            )
        };
        return Ok(Some(Account {
            name,
            uid: pw.pw_uid,
            gid: pw.pw_gid,
            home,
        }));
    }
}

/// Looks a group id up by name (`None` when unknown).
pub fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = nss_buf();
    loop {
        let mut gr = MaybeUninit::<libc::group>::uninit();
        let mut res: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` has `buf.len()` bytes.
        let r = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                gr.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut res,
            )
        };
        if r == libc::ERANGE && buf.len() < 1 << 20 {
            buf = vec![0; buf.len() * 4];
            continue;
        }
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        if res.is_null() {
            return Ok(None);
        }
        // SAFETY: initialised on success with a non-null result.
        return Ok(Some(unsafe { gr.assume_init() }.gr_gid));
    }
}

/// Supplementary groups of user `name` with primary group `gid`.
pub fn group_list(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(64)];
        let mut count = n;
        // SAFETY: `groups` holds `count` entries; the call writes at most that many.
        let r = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if r >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            return Ok(groups);
        }
        if count <= n || n > 65_536 {
            return Err(io::Error::other("getgrouplist failed"));
        }
        n = count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_integers_without_allocating() {
        for v in [0, 7, -1000, 1000, i32::MIN, i32::MAX] {
            let mut buf = [0u8; 12];
            let n = format_i32(v, &mut buf);
            assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), v.to_string());
        }
    }

    #[test]
    fn looks_up_root() {
        let root = user_by_name("root").unwrap().unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(user_by_uid(0).unwrap().unwrap().name, "root");
        assert!(user_by_name("daros-no-such-user").unwrap().is_none());
        assert_eq!(group_by_name("root").unwrap(), Some(0));
        assert!(group_list("root", 0).unwrap().contains(&0));
    }
}
