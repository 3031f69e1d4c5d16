//! Spec versions (seed 000 §10.4.1): every accepted spec change is a new
//! version; rollback applies an old version as a new one, through the
//! lifecycle like any update.

use crate::model::application::Application;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Where a version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "origin")]
pub enum VersionOrigin {
    /// Applied by a user.
    Apply,
    /// Rollback to an earlier version.
    Rollback {
        /// The version whose spec was restored.
        to: u32,
    },
    /// A failed rollout rolled back by itself to the version it started from.
    AutoRollback {
        /// The version whose spec was restored.
        to: u32,
    },
}

/// One version of an application's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppVersion {
    /// Version number, from 1.
    pub version: u32,
    /// The spec (shared: versions are immutable).
    pub spec: Arc<Application>,
    /// When it was accepted.
    pub created: Timestamp,
    /// Where it came from.
    pub origin: VersionOrigin,
}

/// A version as listed by `describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionSummary {
    /// Version number.
    pub version: u32,
    /// When accepted.
    pub created: Timestamp,
    /// Origin.
    pub origin: VersionOrigin,
    /// True for the version in force.
    pub current: bool,
}
