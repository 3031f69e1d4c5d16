//! D-AROS ebpf.
#![warn(missing_docs)]
