//! The cgroup-v2 VM test runner: boots Debian's kernel under QEMU (TCG, q35) with only
//! cgroup v2, the host root visible read-only under a tmpfs overlay, and runs programs.
//!
//! Flow: [`kernel`] fetches and caches the kernel (using [`bzimage`], [`modules`],
//! [`elf`]) and builds the [`initramfs`] ([`cpio`]); [`runner`] writes a [`job`], starts
//! [`qemu`] and collects the results; [`watch`] tells a stuck guest from a slow one and
//! shows it through QEMU's [`monitor`]. [`host`] names the host tools and their packages.

pub mod bzimage;
pub mod cpio;
pub mod elf;
pub mod host;
pub mod initramfs;
pub mod job;
pub mod kernel;
pub mod modules;
pub mod monitor;
pub mod qemu;
pub mod runner;
pub mod watch;

pub use job::{CommandResult, GuestCommand};
pub use kernel::{KernelCache, KernelSource, PreparedKernel};
pub use qemu::{DiskCache, VmEnd};
pub use runner::{EXIT_NO_STATUS, EXIT_TIMEOUT, RunReport, Vm, VmError, VmOptions};
pub use watch::Stuck;
