//! The executor used when darosd is built without a runtime executor: it
//! accepts work and runs nothing, and says so in the log.

use std::sync::Mutex;

use tokio::sync::broadcast;
use tracing::warn;

use super::work::{BoxFuture, ExecError, NodeReport, NodeWork, WorkExecutor};

/// Accepts every [`NodeWork`] and runs nothing (no runtime executor wired).
#[derive(Debug)]
pub struct NoopExecutor {
    reports: broadcast::Sender<NodeReport>,
    last: Mutex<Option<(u64, u64)>>,
}

impl Default for NoopExecutor {
    fn default() -> Self {
        Self {
            reports: broadcast::channel(16).0,
            last: Mutex::new(None),
        }
    }
}

impl WorkExecutor for NoopExecutor {
    fn execute(&self, work: NodeWork) -> BoxFuture<'_, Result<(), ExecError>> {
        Box::pin(async move {
            let pos = (work.fence.term, work.fence.index);
            let changed = self
                .last
                .lock()
                .map(|mut l| l.replace(pos) != Some(pos))
                .unwrap_or(true);
            if changed && (!work.instances.is_empty() || !work.jobs.is_empty()) {
                warn!(
                    instances = work.instances.len(),
                    jobs = work.jobs.len(),
                    "no runtime executor in this darosd: desired work is not run"
                );
            }
            Ok(())
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<NodeReport> {
        self.reports.subscribe()
    }

    fn current(&self) -> BoxFuture<'_, Vec<NodeReport>> {
        Box::pin(async { Vec::new() })
    }
}
