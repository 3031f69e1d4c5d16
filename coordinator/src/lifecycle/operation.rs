//! Operations users may request (seed 000 §6.3.1, "可接受操作") and the
//! system events that move an application between phases (§6.4).

use serde::{Deserialize, Serialize};
use std::fmt;

/// An operation requested by a user or operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operation {
    /// Apply a new spec version.
    UpdateSpec,
    /// Delete the application (stopping it first when it runs).
    Delete,
    /// Arbitrate and place an admitted application.
    Start,
    /// Stop a scheduled or running application.
    Stop,
    /// Change the replica count of a workload.
    Scale,
    /// Leave Degraded: re-place what was taken away.
    Restore,
    /// Run a failed application through admission again.
    Retry,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What the system observed or decided; each drives one edge of §6.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SystemEvent {
    /// Created → Admitted (准入通过).
    AdmissionPassed,
    /// Created → Rejected (准入失败).
    AdmissionFailed,
    /// Created → Failed (创建异常).
    CreationFailed,
    /// Admitted → Scheduled (资源裁决通过).
    ArbitrationSucceeded,
    /// Admitted → Failed (资源裁决失败).
    ArbitrationFailed,
    /// Scheduled → Running (底层执行成功).
    ExecutionSucceeded,
    /// Scheduled → Failed (底层执行失败).
    ExecutionFailed,
    /// Running → Degraded (资源压力/策略触发/抢占).
    Degrade,
    /// Degraded → Running (资源恢复).
    Recovered,
    /// Running/Degraded → Terminated: the application finished normally.
    Finished,
    /// Scheduled/Running/Degraded → Terminated: evicted by policy.
    Evicted,
    /// Running/Degraded → Failed (运行异常/降级后异常).
    RuntimeFailed,
}

impl fmt::Display for SystemEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
