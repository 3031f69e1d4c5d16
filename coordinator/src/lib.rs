//! D-AROS coordinator.
#![warn(missing_docs)]
