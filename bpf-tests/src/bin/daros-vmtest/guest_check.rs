//! `daros-vmtest guest-check`: the in-guest checks (see `daros_bpf_tests::guest_check`).

use daros_bpf_tests::guest_check;

pub fn run() -> anyhow::Result<i32> {
    let outcomes = guest_check::run_all().map_err(anyhow::Error::msg)?;
    print!("{}", guest_check::render(&outcomes));
    Ok(i32::from(outcomes.iter().any(|o| o.result.is_err())))
}
