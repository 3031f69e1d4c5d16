//! Runs a [`Sampler`] on its own thread at a fixed interval and publishes each
//! [`Snapshot`] for readers (API handlers, metrics) without blocking them.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Sampler, Snapshot};

/// The latest snapshot, shared between the sampler thread and readers.
#[derive(Debug)]
pub struct Latest {
    snapshot: RwLock<Arc<Snapshot>>,
    published: RwLock<Instant>,
}

impl Latest {
    /// Starts with `first`.
    pub fn new(first: Snapshot) -> Self {
        Latest {
            snapshot: RwLock::new(Arc::new(first)),
            published: RwLock::new(Instant::now()),
        }
    }

    /// The current snapshot.
    pub fn get(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the snapshot.
    pub fn publish(&self, s: Snapshot) {
        let s = Arc::new(s);
        match self.snapshot.write() {
            Ok(mut g) => *g = s,
            Err(poisoned) => *poisoned.into_inner() = s,
        }
        match self.published.write() {
            Ok(mut g) => *g = Instant::now(),
            Err(poisoned) => *poisoned.into_inner() = Instant::now(),
        }
    }

    /// Time since the last publish.
    pub fn age(&self) -> Duration {
        match self.published.read() {
            Ok(g) => g.elapsed(),
            Err(poisoned) => poisoned.into_inner().elapsed(),
        }
    }
}

/// The running sampler thread.
#[derive(Debug)]
pub struct SamplerHandle {
    stop: mpsc::Sender<()>,
    join: Option<JoinHandle<()>>,
}

impl SamplerHandle {
    /// Starts sampling every `interval`, publishing into `latest`.
    pub fn spawn(
        mut sampler: Sampler,
        interval: Duration,
        latest: Arc<Latest>,
    ) -> std::io::Result<Self> {
        let (stop, rx) = mpsc::channel::<()>();
        let join = std::thread::Builder::new()
            .name("daros-sampler".into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                loop {
                    let now = Instant::now();
                    let wait = next.saturating_duration_since(now);
                    match rx.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    latest.publish(sampler.tick());
                    next += interval;
                    let now = Instant::now();
                    if next <= now {
                        // Fell behind (suspend, overload): skip the missed ticks.
                        next = now + interval;
                    }
                }
            })?;
        Ok(SamplerHandle {
            stop,
            join: Some(join),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        let _ = self.stop.send(());
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}
