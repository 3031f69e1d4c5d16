//! The bpf(2) commands aya 0.14 does not expose for pinned cgroup links: `BPF_OBJ_GET` on a
//! link pin (aya keeps link fds private) and `BPF_LINK_UPDATE`, which swaps the program behind
//! a link atomically (used when a newer build takes over the pins).

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Error, Result};

/// `BPF_LINK_UPDATE` in `enum bpf_cmd` (`<linux/bpf.h>`, since 5.7).
const BPF_LINK_UPDATE: libc::c_long = 29;

/// `union bpf_attr` as used by `BPF_LINK_UPDATE`.
#[repr(C)]
#[derive(Default)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

/// Replaces the program of the link `link` by `prog` without detaching it.
pub(crate) fn link_update(link: BorrowedFd<'_>, prog: BorrowedFd<'_>, what: &str) -> Result<()> {
    let to_u32 = |fd: i32| u32::try_from(fd).unwrap_or(u32::MAX);
    let attr = LinkUpdateAttr {
        link_fd: to_u32(link.as_raw_fd()),
        new_prog_fd: to_u32(prog.as_raw_fd()),
        ..LinkUpdateAttr::default()
    };
    // SAFETY: bpf(2) reads `size` bytes from a valid, initialised attr that outlives the call;
    // the kernel checks the fds and requires bytes past `size` to be zero (they are absent).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_UPDATE,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<LinkUpdateAttr>(),
        )
    };
    if rc < 0 {
        return Err(Error::Syscall {
            cmd: "BPF_LINK_UPDATE",
            what: what.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `BPF_OBJ_GET` in `enum bpf_cmd`.
const BPF_OBJ_GET: libc::c_long = 7;

/// `union bpf_attr` as used by `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// Opens a pinned bpf object (here: a link, whose fd aya keeps private).
pub(crate) fn obj_get(path: &std::path::Path) -> Result<std::os::fd::OwnedFd> {
    use std::os::{fd::FromRawFd, unix::ffi::OsStrExt};
    let cpath =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| Error::Syscall {
            cmd: "BPF_OBJ_GET",
            what: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
    let attr = ObjGetAttr {
        pathname: cpath.as_ptr() as u64,
        ..ObjGetAttr::default()
    };
    // SAFETY: attr points at a NUL-terminated path that lives until the call returns.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<ObjGetAttr>(),
        )
    };
    if rc < 0 {
        return Err(Error::Syscall {
            cmd: "BPF_OBJ_GET",
            what: path.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    let fd = i32::try_from(rc).map_err(|_| Error::Syscall {
        cmd: "BPF_OBJ_GET",
        what: path.display().to_string(),
        source: std::io::Error::other("fd out of range"),
    })?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}
