//! D-AROS node agent library: everything `darosd` and `darosctl` do lives here;
//! the binaries only parse arguments, call [`daemon::run`] / [`cli::run`] and map
//! errors to exit codes.
#![warn(missing_docs)]

pub mod caps;
pub mod cgroup;
pub mod config;
pub mod gpu;
pub mod model;
pub mod sensing;
