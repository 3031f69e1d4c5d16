//! When this node last had contact with the servers (work accepted from a
//! leader, a report committed): what `disconnect.stopOnClientAfter` measures.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The last contact with the servers.
#[derive(Debug)]
pub struct Contact(Mutex<Instant>);

impl Default for Contact {
    fn default() -> Self {
        Self(Mutex::new(Instant::now()))
    }
}

impl Contact {
    /// Contact now.
    pub fn touch(&self) {
        if let Ok(mut t) = self.0.lock() {
            *t = Instant::now();
        }
    }

    /// Time without contact.
    pub fn silent_for(&self) -> Duration {
        self.0.lock().map_or(Duration::ZERO, |t| t.elapsed())
    }
}
