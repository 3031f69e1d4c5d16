//! D-AROS kernel-dependent tests and the cgroup-v2 VM test runner.
//!
//! - [`vm`]: boots a Debian kernel with only cgroup v2 under QEMU and runs test programs
//!   inside with the host filesystem visible (the `daros-vmtest` binary drives it).
//! - [`cargo_tests`]: finds the test executables `cargo test --no-run` builds.
//! - [`guest_check`]: checks, from inside the guest, that the VM provides what the
//!   cgroup-v2, PSI, IO and eBPF tests rely on.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod cargo_tests;
pub mod guest_check;
pub mod vm;
