//! Watching processes that are not our children: a pidfd (Linux 5.3+)
//! becomes readable when its process exits, can be polled by tokio, and
//! signals exactly that process even if its pid number is reused later.

use super::protocol::{ProcessIdentity, process_start_time};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
use std::io;
use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;

/// A process held by a pidfd.
#[derive(Debug)]
pub struct PidFd {
    fd: AsyncFd<OwnedFd>,
    id: ProcessIdentity,
}

impl PidFd {
    /// Opens the process `id` if it is still that process: same pid and
    /// same start time. `Ok(None)` when it is gone (or the pid now belongs
    /// to another process). Needs a tokio runtime.
    pub fn open(id: ProcessIdentity) -> io::Result<Option<Self>> {
        let Some(pid) = Pid::from_raw(i32::try_from(id.pid).unwrap_or(0)) else {
            return Ok(None);
        };
        let fd = match pidfd_open(pid, PidfdFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Checked after opening: if the pid was reused before the open, the
        // start time differs; after it, the fd pins the process.
        match process_start_time(id.pid) {
            Ok(t) if t == id.start_time => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        let fd = crate::sys::async_readable(fd)?;
        Ok(Some(Self { fd, id }))
    }

    /// The process.
    pub fn identity(&self) -> ProcessIdentity {
        self.id
    }

    /// Resolves when the process has exited.
    pub async fn exited(&self) {
        // A pidfd stays readable once the process exited; errors (which
        // poll cannot really give) count as exited too.
        let _ = self.fd.readable().await;
    }

    /// True once the process has exited.
    pub fn has_exited(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            self.fd.get_ref(),
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }

    /// Sends `sig` to the process (not to a later holder of its pid).
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        match pidfd_send_signal(self.fd.get_ref(), sig) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn sees_exit_and_refuses_a_wrong_start_time() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let id = ProcessIdentity::of(child.id()).unwrap();
        let wrong = ProcessIdentity {
            start_time: id.start_time + 1,
            ..id
        };
        assert!(PidFd::open(wrong).unwrap().is_none());
        let fd = PidFd::open(id).unwrap().unwrap();
        assert!(!fd.has_exited());
        fd.signal(Signal::KILL).unwrap();
        tokio::time::timeout(Duration::from_secs(10), fd.exited())
            .await
            .unwrap();
        assert!(fd.has_exited());
        child.wait().unwrap();
        assert!(PidFd::open(id).unwrap().is_none(), "reaped: gone");
    }
}
