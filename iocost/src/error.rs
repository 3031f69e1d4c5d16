//! Errors of this crate.

use std::path::{Path, PathBuf};

/// Why iocost could not be measured, read or set.
#[derive(Debug, thiserror::Error)]
pub enum IoCostError {
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// There is nothing to measure here (the kernel's model is asked for, or
    /// the data directory is not on a disk the agent manages).
    #[error("{0}")]
    NotApplicable(String),
    /// The calibration cannot run or gave nothing usable.
    #[error("calibration: {0}")]
    Calibration(String),
}

impl IoCostError {
    pub(crate) fn io(path: &Path, op: &'static str, source: std::io::Error) -> Self {
        IoCostError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}
