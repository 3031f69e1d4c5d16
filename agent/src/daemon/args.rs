//! Command line of `darosd`.

use std::path::PathBuf;

use clap::Parser;

use crate::config::load::FlagValue;

/// Command line of `darosd`. Every flag overrides the matching key of the
/// configuration file and of `DAROS_<SECTION>_<KEY>` environment variables.
#[derive(Debug, Parser, Default)]
#[command(
    name = "darosd",
    version,
    // A flag given twice: the last wins (a wrapper's defaults, then the caller's).
    args_override_self = true,
    about = "D-AROS node agent: samples the node and its workloads and serves them on a local socket",
    after_help = "Configuration: /etc/daros/agent.toml (or --config / DAROS_CONFIG), DAROS_<SECTION>_<KEY> environment variables, then flags.\nExit status: 0 clean shutdown, 1 runtime error, 2 configuration error."
)]
pub struct DaemonArgs {
    /// Configuration file (must exist when given).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Socket of the local API (api.socket).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<String>,
    /// State directory (agent.data_dir).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<String>,
    /// Managed cgroup root relative to each hierarchy (cgroup.managed_root).
    #[arg(long, value_name = "NAME")]
    pub managed_root: Option<String>,
    /// eBPF pin directory on bpffs (net.pin_dir).
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<String>,
    /// Sampling interval such as 1s or 500ms (sensing.interval).
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Discovery interval (discovery.interval).
    #[arg(long, value_name = "DURATION")]
    pub discovery_interval: Option<String>,
    /// Serve Prometheus /metrics on this TCP address (metrics.listen).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Log filter such as info or daros_agent=debug (agent.log_level).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Node name (agent.node_name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Join token for a first start (mesh.join_token); needs --server.
    #[arg(long, value_name = "TOKEN")]
    pub join: Option<String>,
    /// RPC address of the server agent to join through (mesh.join_server).
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// Load and validate the configuration, print the effective one as TOML, exit.
    #[arg(long)]
    pub check_config: bool,
    /// Create what only a privileged step may (the managed cgroup root: the
    /// hierarchy root is writable only with CAP_DAC_OVERRIDE, which the
    /// hardened unit does not keep), then exit (the unit's ExecStartPre=+).
    #[arg(long)]
    pub prepare: bool,
}

impl DaemonArgs {
    /// The flags that set configuration keys.
    pub fn flags(&self) -> Vec<FlagValue> {
        let pairs: [(&'static str, &'static str, &Option<String>); 11] = [
            ("api.socket", "--socket", &self.socket),
            ("agent.data_dir", "--data-dir", &self.data_dir),
            ("cgroup.managed_root", "--managed-root", &self.managed_root),
            ("net.pin_dir", "--pin-dir", &self.pin_dir),
            ("sensing.interval", "--interval", &self.interval),
            (
                "discovery.interval",
                "--discovery-interval",
                &self.discovery_interval,
            ),
            ("metrics.listen", "--metrics-listen", &self.metrics_listen),
            ("agent.log_level", "--log-level", &self.log_level),
            ("agent.node_name", "--node-name", &self.node_name),
            ("mesh.join_token", "--join", &self.join),
            ("mesh.join_server", "--server", &self.server),
        ];
        pairs
            .into_iter()
            .filter_map(|(key, flag, v)| {
                v.as_ref().map(|v| FlagValue {
                    key,
                    flag,
                    value: v.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_given_twice_takes_the_last_value() {
        let a = DaemonArgs::try_parse_from(["darosd", "--interval", "200ms", "--interval", "1s"])
            .unwrap();
        assert_eq!(a.interval.as_deref(), Some("1s"));
    }
}
