//! Telling a slow guest from a stuck one: it must reach its job (the boot marker)
//! within a limit, and then keep rewriting its heartbeat. A stuck guest is shown
//! through QEMU's monitor (each vCPU's instruction pointer) and given an NMI, on
//! which its kernel panics and prints its log and every CPU's stack.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::monitor;

/// How often the files are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the supervisor watches, and for how long it waits.
#[derive(Debug, Clone)]
pub struct GuestWatch {
    /// The file the guest writes once it is about to start its job.
    pub marker: PathBuf,
    /// How long the guest may take to write it.
    pub boot_within: Duration,
    /// The file the job rewrites every few seconds while it runs.
    pub heartbeat: PathBuf,
    /// How long, once booted, the guest may go without changing it.
    pub hang_after: Duration,
    /// QEMU's monitor socket, to read the vCPUs' state and send the NMI.
    pub monitor: Option<PathBuf>,
    /// How long a stuck guest then gets to print its panic before QEMU is killed.
    pub grace: Duration,
}

/// How a guest was stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stuck {
    /// It never reached its job.
    Boot,
    /// It reached its job and then stopped beating.
    Hang,
}

impl GuestWatch {
    /// What the vCPUs were doing, then the NMI; returns the description.
    pub fn diagnose(&self) -> String {
        let Some(m) = &self.monitor else {
            return "no monitor socket: the guest's state is unknown".into();
        };
        let regs = match monitor::command(m, "info registers -a", Duration::from_secs(10)) {
            Ok(r) => monitor::cpu_lines(&r),
            Err(e) => format!("the qemu monitor did not answer ({e}): qemu itself may be stuck"),
        };
        let nmi = match monitor::command(m, "nmi", Duration::from_secs(5)) {
            Ok(_) => "sent an NMI (the guest kernel panics on it and prints its log)".into(),
            Err(e) => format!("could not send an NMI: {e}"),
        };
        format!("{regs}\n{nmi}")
    }
}

/// The watch over one run, polled by the supervisor.
#[derive(Debug)]
pub struct Watcher<'a> {
    watch: &'a GuestWatch,
    start: Instant,
    checked: Instant,
    booted: bool,
    beat: Option<Vec<u8>>,
    progress: Instant,
    done: bool,
}

impl<'a> Watcher<'a> {
    /// Starts watching a guest started now.
    pub fn new(watch: &'a GuestWatch) -> Self {
        let now = Instant::now();
        Self {
            watch,
            start: now,
            checked: now,
            booted: false,
            beat: None,
            progress: now,
            done: false,
        }
    }

    /// Whether the guest is stuck, at most once per run (then the watch ends).
    pub fn poll(&mut self) -> Option<Stuck> {
        if self.done || self.checked.elapsed() < CHECK_EVERY {
            return None;
        }
        let now = Instant::now();
        self.checked = now;
        if !self.booted {
            if self.watch.marker.exists() {
                self.booted = true;
                self.progress = now;
            } else if now - self.start >= self.watch.boot_within {
                self.done = true;
                return Some(Stuck::Boot);
            }
            return None;
        }
        let beat = std::fs::read(&self.watch.heartbeat).ok();
        if beat != self.beat {
            self.beat = beat;
            self.progress = now;
        } else if now - self.progress >= self.watch.hang_after {
            self.done = true;
            return Some(Stuck::Hang);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(dir: &std::path::Path, boot_within_ms: u64, hang_after_ms: u64) -> GuestWatch {
        GuestWatch {
            marker: dir.join("boot-uptime"),
            boot_within: Duration::from_millis(boot_within_ms),
            heartbeat: dir.join("heartbeat"),
            hang_after: Duration::from_millis(hang_after_ms),
            monitor: None,
            grace: Duration::ZERO,
        }
    }

    /// Polls until the watcher says stuck or `for_` passes.
    fn poll_for(w: &mut Watcher<'_>, for_: Duration, mut each: impl FnMut()) -> Option<Stuck> {
        let t0 = Instant::now();
        while t0.elapsed() < for_ {
            each();
            if let Some(s) = w.poll() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    #[test]
    fn no_marker_in_time_is_a_stuck_boot_said_once() {
        let d = tempfile::tempdir().unwrap();
        let g = watch(d.path(), 1500, 60_000);
        let mut w = Watcher::new(&g);
        assert_eq!(
            poll_for(&mut w, Duration::from_secs(5), || {}),
            Some(Stuck::Boot)
        );
        assert_eq!(poll_for(&mut w, Duration::from_millis(1200), || {}), None);
    }

    #[test]
    fn a_beating_guest_is_never_stuck_and_a_silent_one_hangs() {
        let d = tempfile::tempdir().unwrap();
        let g = watch(d.path(), 60_000, 2500);
        std::fs::write(&g.marker, "1.0 1.0").unwrap();
        let mut w = Watcher::new(&g);
        let mut n = 0u32;
        // Beating (a new uptime each time) for longer than hang_after: fine.
        assert_eq!(
            poll_for(&mut w, Duration::from_secs(5), || {
                n += 1;
                std::fs::write(&g.heartbeat, n.to_string()).unwrap();
            }),
            None
        );
        // Then silent: stuck once hang_after has passed without a change.
        let t0 = Instant::now();
        assert_eq!(
            poll_for(&mut w, Duration::from_secs(10), || {}),
            Some(Stuck::Hang)
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(1500),
            "{:?}",
            t0.elapsed()
        );
    }
}
