//! systemd notifications: READY, WATCHDOG, STATUS and STOPPING (no-ops outside systemd).

use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tracing::{debug, warn};

use crate::sensing::Latest;

fn send(states: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        warn!(error = %e, "sd_notify failed");
    }
}

/// `READY=1` with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Sends `WATCHDOG=1` every half of `WATCHDOG_USEC` while the sampler keeps
/// publishing (a stuck sampler stops the pings, and systemd restarts the agent).
pub async fn watchdog(latest: Arc<Latest>, interval: Duration) {
    let Some(timeout) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = (timeout / 2).max(Duration::from_millis(100));
    let stale_after = interval * 3 + Duration::from_secs(1);
    debug!(?period, "systemd watchdog enabled");
    let mut t = tokio::time::interval(period);
    loop {
        t.tick().await;
        if latest.age() <= stale_after {
            send(&[NotifyState::Watchdog]);
        } else {
            warn!(age = ?latest.age(), "sampler stalled; withholding watchdog ping");
        }
    }
}
