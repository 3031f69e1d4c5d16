//! `darosctl members`: mesh members and their liveness.

use std::io::Write;

use daros_gossip::membership::Member;

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::client::Client;

/// Arguments of `darosctl members`.
#[derive(Debug, clap::Args)]
pub struct MembersArgs {}

/// Runs `darosctl members`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    _a: MembersArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let members: Vec<Member> = client.get("/v1/members").await?;
    print(out, fmt, &members, || {
        let mut t = Table::new(
            &[
                "NODE",
                "STATUS",
                "ROLE",
                "RPC",
                "GOSSIP",
                "LAST HEARD",
                "CPU",
                "MEMORY",
                "VERSION",
            ],
            &[false, false, false, false, false, true, true, true, false],
        );
        for m in &members {
            t.row(vec![
                m.node_id.to_string(),
                format!("{:?}", m.status).to_lowercase(),
                m.role
                    .map_or("-".into(), |r| format!("{r:?}").to_lowercase()),
                m.rpc_addr.map_or("-".into(), |a| a.to_string()),
                m.gossip_addr.to_string(),
                m.last_heard_ms.map_or("-".into(), |ms| format!("{ms}ms")),
                m.capacity
                    .as_ref()
                    .map_or("-".into(), |c| format!("{}m", c.cpu_millicores)),
                m.capacity
                    .as_ref()
                    .map_or("-".into(), |c| super::output::bytes(c.memory_bytes)),
                m.agent_version.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        t.render()
    })?;
    Ok(())
}
