//! Errors of spec parsing and validation: every one names the document, the
//! field path and the reason.

use crate::field::FieldError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One problem in one document of a spec file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    /// 0-based index of the document in the file.
    pub document: usize,
    /// `kind` of the document, when it could be read.
    pub kind: Option<String>,
    /// `metadata.name`, when it could be read.
    pub name: Option<String>,
    /// Field path (`spec.workloads[2].resources.cpu.limit`); empty for the
    /// whole document.
    pub path: String,
    /// What is wrong.
    pub reason: String,
    /// Line in the input (1-based), when known.
    pub line: Option<usize>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document + 1)?;
        match (&self.kind, &self.name) {
            (Some(k), Some(n)) => write!(f, " ({k} {n})")?,
            (Some(k), None) => write!(f, " ({k})")?,
            _ => {}
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.reason)?;
        if let Some(l) = self.line {
            write!(f, " (line {l})")?;
        }
        Ok(())
    }
}

/// Every problem found in a spec file; nothing of the file is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} problem{} in spec", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl SpecErrors {
    /// Errors of one document from field errors.
    pub fn from_fields(
        document: usize,
        kind: Option<&str>,
        name: Option<&str>,
        errors: Vec<FieldError>,
    ) -> Self {
        Self(
            errors
                .into_iter()
                .map(|e| SpecError {
                    document,
                    kind: kind.map(str::to_string),
                    name: name.map(str::to_string),
                    path: e.path,
                    reason: e.reason,
                    line: None,
                })
                .collect(),
        )
    }
}
