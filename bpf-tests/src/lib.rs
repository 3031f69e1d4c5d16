//! D-AROS bpf-tests.
#![warn(missing_docs)]
