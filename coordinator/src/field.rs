//! Field-addressed validation errors shared by every validator in the crate.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One problem with one field of an input document, addressed by its path
/// (for example `spec.workloads[2].resources.cpu.limit`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FieldError {
    /// Dotted path of the field, with `[i]` for list items.
    pub path: String,
    /// What is wrong with it, in words an operator can act on.
    pub reason: String,
}

impl FieldError {
    /// Creates an error for `path`.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Collects every problem of a document so that one run reports all of them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Violations {
    errors: Vec<FieldError>,
}

impl Violations {
    /// An empty collection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a problem with the field at `path`.
    pub fn push(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.errors.push(FieldError::new(path, reason));
    }

    /// Records problems found by another validator.
    pub fn extend(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        self.errors.extend(errors);
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// The recorded problems.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }

    /// `Ok(())` when empty, else every recorded problem.
    pub fn into_result(self) -> Result<(), Vec<FieldError>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

/// Joins a parent path and a child key: `join("spec", "cpu") == "spec.cpu"`.
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}
