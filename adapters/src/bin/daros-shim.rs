//! `daros-shim`: owns one run of a process workload (see
//! `daros_adapters::process::shim`).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    daros_adapters::process::shim::main_from_args(std::env::args_os())
}
