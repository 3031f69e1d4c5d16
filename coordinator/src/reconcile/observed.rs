//! Identities of running things and the states runtimes report for them.

use crate::model::failure::Failure;
use crate::model::names::AppKey;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// What a runtime adapter reports about an instance or an init job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum ObservedState {
    /// Placed, not started yet.
    Pending,
    /// Being created or started.
    Starting,
    /// Running, readiness not (yet) confirmed.
    Running,
    /// Running and ready (readiness checks pass, or it has none).
    Ready,
    /// Exited by itself with this code (0 = success).
    Exited {
        /// Exit code.
        code: i32,
    },
    /// Failed (crash, failed liveness check, adapter error, node loss).
    Failed {
        /// The failure, typed per seed §4.7.
        failure: Failure,
    },
    /// Stopped on request.
    Stopped,
}

impl ObservedState {
    /// The category of the failure it ended with, if it is one (a non-zero
    /// exit is a runtime failure).
    pub fn failure_category(&self) -> Option<crate::model::failure::FailureCategory> {
        match self {
            ObservedState::Exited { code } if *code != 0 => {
                Some(crate::model::failure::FailureCategory::Runtime)
            }
            ObservedState::Failed { failure } => Some(failure.category()),
            _ => None,
        }
    }

    /// True while the instance occupies its runtime (started, not ended).
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            ObservedState::Starting | ObservedState::Running | ObservedState::Ready
        )
    }

    /// True when it ended by itself (exit or failure).
    pub fn has_ended(&self) -> bool {
        matches!(
            self,
            ObservedState::Exited { .. } | ObservedState::Failed { .. }
        )
    }

    /// True for an end that counts as a failure.
    pub fn is_failure(&self) -> bool {
        match self {
            ObservedState::Exited { code } => *code != 0,
            ObservedState::Failed { .. } => true,
            _ => false,
        }
    }

    /// Short description.
    pub fn describe(&self) -> String {
        match self {
            ObservedState::Pending => "pending".into(),
            ObservedState::Starting => "starting".into(),
            ObservedState::Running => "running".into(),
            ObservedState::Ready => "ready".into(),
            ObservedState::Exited { code } => format!("exited with code {code}"),
            ObservedState::Failed { failure } => failure.to_string(),
            ObservedState::Stopped => "stopped".into(),
        }
    }
}

/// Error reading an instance or job id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id {input:?}: expected {expected}")]
pub struct IdError {
    /// The text.
    pub input: String,
    /// The expected shape.
    pub expected: &'static str,
}

/// One replica of a workload, at the spec version it runs:
/// `tenant/app/workload/replica/vN`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId {
    /// Application.
    pub app: AppKey,
    /// Workload name.
    pub workload: String,
    /// Replica number.
    pub replica: u32,
    /// Spec version it runs.
    pub version: u32,
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/v{}",
            self.app, self.workload, self.replica, self.version
        )
    }
}

const INSTANCE_SHAPE: &str = "tenant/app/workload/replica/vN";
const JOB_SHAPE: &str = "tenant/app/workload/init/job/vN";

fn version(s: &str) -> Option<u32> {
    s.strip_prefix('v')?.parse().ok()
}

impl FromStr for InstanceId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || IdError {
            input: s.into(),
            expected: INSTANCE_SHAPE,
        };
        let p: Vec<&str> = s.split('/').collect();
        let [t, a, w, r, v] = p.as_slice() else {
            return Err(err());
        };
        if t.is_empty() || a.is_empty() || w.is_empty() {
            return Err(err());
        }
        Ok(Self {
            app: AppKey::new(*t, *a),
            workload: (*w).into(),
            replica: r.parse().map_err(|_| err())?,
            version: version(v).ok_or_else(err)?,
        })
    }
}

/// An init job of a workload at a spec version:
/// `tenant/app/workload/init/job/vN`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InitJobId {
    /// Application.
    pub app: AppKey,
    /// Workload the job belongs to.
    pub workload: String,
    /// Job name.
    pub job: String,
    /// Spec version.
    pub version: u32,
}

impl fmt::Display for InitJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/init/{}/v{}",
            self.app, self.workload, self.job, self.version
        )
    }
}

impl FromStr for InitJobId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || IdError {
            input: s.into(),
            expected: JOB_SHAPE,
        };
        let p: Vec<&str> = s.split('/').collect();
        let [t, a, w, "init", j, v] = p.as_slice() else {
            return Err(err());
        };
        if t.is_empty() || a.is_empty() || w.is_empty() || j.is_empty() {
            return Err(err());
        }
        Ok(Self {
            app: AppKey::new(*t, *a),
            workload: (*w).into(),
            job: (*j).into(),
            version: version(v).ok_or_else(err)?,
        })
    }
}

macro_rules! string_serde {
    ($ty:ident) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(InstanceId);
string_serde!(InitJobId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        let i: InstanceId = "acme/shop/web/2/v3".parse().unwrap();
        assert_eq!(i.replica, 2);
        assert_eq!(i.to_string(), "acme/shop/web/2/v3");
        let j: InitJobId = "acme/shop/web/init/migrate/v1".parse().unwrap();
        assert_eq!(j.job, "migrate");
        assert_eq!(j.to_string(), "acme/shop/web/init/migrate/v1");
        assert!("acme/shop/web/x/v1".parse::<InstanceId>().is_err());
        assert!("acme/shop/web/1".parse::<InstanceId>().is_err());
        let e = "a/b".parse::<InitJobId>().unwrap_err();
        assert!(e.to_string().contains("tenant/app/workload/init/job/vN"));
    }
}
