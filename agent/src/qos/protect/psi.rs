//! PSI triggers: `some <stall_us> <window_us>` written to a pressure file
//! (`/proc/pressure/*` or a cgroup's `*.pressure`), then `poll()` reports
//! `POLLPRI` when the stall within the window crosses the threshold
//! (Documentation/accounting/psi.rst). The trigger lives as long as the file is open.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// Smallest window the kernel accepts.
pub const MIN_WINDOW: Duration = Duration::from_millis(500);
/// Without CAP_SYS_RESOURCE the kernel only accepts windows that are multiples of this.
pub const UNPRIVILEGED_WINDOW: Duration = Duration::from_secs(2);

/// One armed trigger.
#[derive(Debug)]
pub struct Trigger {
    file: File,
    path: PathBuf,
    /// What it watches, for events (`node cpu`, `managed/db memory`).
    pub label: String,
    /// The trigger text in effect.
    pub spec: String,
}

/// Why a trigger could not be armed.
#[derive(Debug, thiserror::Error)]
#[error("arming PSI trigger {spec:?} on {path}: {source}")]
pub struct TriggerError {
    /// Pressure file.
    pub path: PathBuf,
    /// Trigger text.
    pub spec: String,
    /// Underlying error.
    pub source: std::io::Error,
}

impl Trigger {
    /// Arms `some <stall> <window>` on `path`. Without CAP_SYS_RESOURCE the
    /// kernel refuses windows that are not multiples of 2 s: the trigger is then
    /// armed with a 2 s window and the same stall share.
    pub fn arm(
        path: &Path,
        stall: Duration,
        window: Duration,
        label: String,
    ) -> Result<Self, TriggerError> {
        match Self::arm_exact(path, stall, window, label.clone()) {
            Err(e)
                if e.source.raw_os_error() == Some(libc::EINVAL)
                    && !window
                        .as_micros()
                        .is_multiple_of(UNPRIVILEGED_WINDOW.as_micros()) =>
            {
                let scaled = stall
                    .mul_f64(UNPRIVILEGED_WINDOW.as_secs_f64() / window.as_secs_f64().max(1e-3));
                Self::arm_exact(
                    path,
                    scaled.min(UNPRIVILEGED_WINDOW),
                    UNPRIVILEGED_WINDOW,
                    label,
                )
                .map_err(|_| e)
            }
            r => r,
        }
    }

    fn arm_exact(
        path: &Path,
        stall: Duration,
        window: Duration,
        label: String,
    ) -> Result<Self, TriggerError> {
        let spec = format!("some {} {}", stall.as_micros(), window.as_micros());
        let err = |source| TriggerError {
            path: path.to_path_buf(),
            spec: spec.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(err)?;
        // The kernel overwrites the last byte of the write with NUL: send one.
        let mut bytes = spec.clone().into_bytes();
        bytes.push(0);
        file.write_all(&bytes).map_err(err)?;
        Ok(Trigger {
            file,
            path: path.to_path_buf(),
            label,
            spec,
        })
    }

    /// The pressure file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What a wait returned.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Woken {
    /// Indices of triggers that fired.
    pub fired: Vec<usize>,
    /// Indices of triggers whose file went away (cgroup removed).
    pub gone: Vec<usize>,
    /// The wake-up fd was readable.
    pub woken: bool,
}

/// Waits up to `timeout` for any trigger or for `wake` to become readable.
pub fn wait(
    triggers: &[Trigger],
    wake: &impl std::os::fd::AsFd,
    timeout: Duration,
) -> std::io::Result<Woken> {
    let mut fds: Vec<PollFd<'_>> = triggers
        .iter()
        .map(|t| PollFd::new(&t.file, PollFlags::PRI))
        .collect();
    fds.push(PollFd::new(wake, PollFlags::IN));
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut out = Woken::default();
    match poll(&mut fds, Some(&ts)) {
        Ok(0) => return Ok(out),
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(out),
        Err(e) => return Err(e.into()),
    }
    let last = fds.len() - 1;
    for (i, fd) in fds.iter().enumerate() {
        let r = fd.revents();
        if i == last {
            out.woken = r.contains(PollFlags::IN);
        } else if r.intersects(PollFlags::ERR | PollFlags::NVAL | PollFlags::HUP) {
            out.gone.push(i);
        } else if r.contains(PollFlags::PRI) {
            out.fired.push(i);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_cpu_trigger_arms_and_fires_under_load() {
        let path = Path::new("/proc/pressure/cpu");
        if !path.exists() {
            println!("SKIPPED: no /proc/pressure (kernel without PSI)");
            return;
        }
        let t = Trigger::arm(
            path,
            Duration::from_millis(1),
            MIN_WINDOW,
            "node cpu".into(),
        )
        .expect("root can arm PSI triggers");
        println!("armed {:?}", t.spec);
        let (r, w) = rustix::pipe::pipe().unwrap();
        // More spinning threads than CPUs: CPU pressure must appear.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        let spinners: Vec<_> = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut fired = false;
        while std::time::Instant::now() < deadline {
            let got = wait(std::slice::from_ref(&t), &r, Duration::from_millis(200)).unwrap();
            if !got.fired.is_empty() {
                fired = true;
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for s in spinners {
            s.join().unwrap();
        }
        assert!(
            fired,
            "the CPU pressure trigger never fired under {n} spinning threads"
        );
        rustix::io::write(&w, b"x").unwrap();
        let got = wait(std::slice::from_ref(&t), &r, Duration::from_secs(1)).unwrap();
        assert!(got.woken);
    }

    #[test]
    fn bad_trigger_names_file_and_spec() {
        let dir = tempfile::tempdir().unwrap();
        let e = Trigger::arm(
            &dir.path().join("nope.pressure"),
            Duration::from_millis(1),
            MIN_WINDOW,
            "x".into(),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("nope.pressure") && m.contains("some 1000 500000"),
            "{m}"
        );
    }
}
