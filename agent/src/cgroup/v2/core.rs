//! Core interface files every cgroup2 directory has.

/// Processes in the cgroup; writing a pid moves it here.
pub const PROCS: &str = "cgroup.procs";
/// Controllers available to this cgroup.
pub const CONTROLLERS: &str = "cgroup.controllers";
/// Controllers enabled for the children.
pub const SUBTREE_CONTROL: &str = "cgroup.subtree_control";
/// `populated` and `frozen` flags.
pub const EVENTS: &str = "cgroup.events";

/// Splits a space-separated controller list.
pub fn controller_list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}
