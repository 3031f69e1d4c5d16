//! `darosctl audit [--tenant T] [--principal P] [--since 1h] [--after N]`:
//! the audit trail (who changed what, and who was refused), and `darosctl
//! audit report [--since 24h]`: per tenant, changes applied, refused and
//! forbidden, and the principals refused.

use std::collections::BTreeMap;
use std::io::Write;

use daros_coordinator::model::time::DurationMs;
use daros_coordinator::state::audit::{AuditOutcome, AuditPage, AuditRecord};
use serde::Serialize;

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::client::Client;

/// Arguments of `darosctl audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// `report`: a summary instead of the records.
    #[command(subcommand)]
    pub report: Option<AuditVerb>,
    /// Only records touching this tenant.
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    /// Only records of this principal (`root`, `user:alice`).
    #[arg(long, global = true)]
    pub principal: Option<String>,
    /// Only records of the last `since` (`90s`, `1h`, `7d`).
    #[arg(long, global = true)]
    pub since: Option<DurationMs>,
    /// Only records after this sequence number.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
}

/// `darosctl audit report`.
#[derive(Debug, clap::Subcommand)]
pub enum AuditVerb {
    /// Changes per tenant and refused attempts.
    Report,
}

/// The compliance report.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Records read.
    pub records: usize,
    /// Records compacted by retention before the oldest held.
    pub compacted: u64,
    /// Per tenant (`-` for cluster-wide objects): applied, refused, forbidden.
    pub tenants: BTreeMap<String, [u64; 3]>,
    /// Forbidden attempts per principal.
    pub forbidden_by: BTreeMap<String, u64>,
}

fn query(a: &AuditArgs, after: u64) -> String {
    let mut q = vec![format!("after={after}"), "limit=5000".to_string()];
    if let Some(t) = &a.tenant {
        q.push(format!("tenant={}", crate::client::encode_id(t)));
    }
    if let Some(p) = &a.principal {
        q.push(format!(
            "principal={}",
            crate::client::encode_id(p).replace(':', "%3A")
        ));
    }
    if let Some(s) = a.since {
        let now = crate::control::plane::now().0;
        q.push(format!("since={}", now.saturating_sub(s.0)));
    }
    format!("/v1/audit?{}", q.join("&"))
}

/// Every record matching, page after page.
async fn all(client: &Client, a: &AuditArgs) -> Result<AuditPage, CliError> {
    let mut out = AuditPage::default();
    let mut after = a.after;
    loop {
        let p: AuditPage = client.get(&query(a, after)).await?;
        out.compacted = p.compacted;
        let Some(last) = p.records.last().map(|r| r.seq) else {
            break;
        };
        after = last;
        out.records.extend(p.records);
    }
    Ok(out)
}

fn outcome(r: &AuditRecord) -> String {
    match &r.outcome {
        AuditOutcome::Applied => "applied".into(),
        AuditOutcome::Refused { reason } => format!("refused: {reason}"),
        AuditOutcome::Forbidden { reason } => format!("FORBIDDEN: {reason}"),
        AuditOutcome::Compacted { dropped } => format!("compacted ({dropped} dropped so far)"),
    }
}

/// Runs `darosctl audit`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: AuditArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let page = all(client, &a).await?;
    if a.report.is_some() {
        let mut r = Report {
            records: page.records.len(),
            compacted: page.compacted,
            ..Report::default()
        };
        for rec in &page.records {
            let slot = match rec.outcome {
                AuditOutcome::Applied => 0,
                AuditOutcome::Refused { .. } => 1,
                AuditOutcome::Forbidden { .. } => 2,
                AuditOutcome::Compacted { .. } => continue,
            };
            if slot == 2 {
                *r.forbidden_by.entry(rec.principal.clone()).or_default() += 1;
            }
            let tenants = if rec.tenants.is_empty() {
                vec!["-".to_string()]
            } else {
                rec.tenants.clone()
            };
            for t in tenants {
                r.tenants.entry(t).or_default()[slot] += 1;
            }
        }
        print(out, fmt, &r, || {
            let mut t = Table::new(
                &["TENANT", "APPLIED", "REFUSED", "FORBIDDEN"],
                &[false, true, true, true],
            );
            for (name, c) in &r.tenants {
                t.row(vec![
                    name.clone(),
                    c[0].to_string(),
                    c[1].to_string(),
                    c[2].to_string(),
                ]);
            }
            let mut s = format!(
                "{} records{}\n{}",
                r.records,
                if r.compacted > 0 {
                    format!(" ({} older ones compacted by retention)", r.compacted)
                } else {
                    String::new()
                },
                t.render()
            );
            if !r.forbidden_by.is_empty() {
                let mut f = Table::new(&["PRINCIPAL", "FORBIDDEN"], &[false, true]);
                for (p, n) in &r.forbidden_by {
                    f.row(vec![p.clone(), n.to_string()]);
                }
                s.push_str("\nrefused attempts:\n");
                s.push_str(&f.render());
            }
            s
        })?;
        return Ok(());
    }
    print(out, fmt, &page.records, || {
        let mut t = Table::new(
            &[
                "SEQ",
                "TIME",
                "PRINCIPAL",
                "SOURCE",
                "VERB",
                "OBJECT",
                "OUTCOME",
            ],
            &[true, false, false, false, false, false, false],
        );
        for r in &page.records {
            t.row(vec![
                r.seq.to_string(),
                crate::control::cloud_events::rfc3339(r.time.0),
                r.principal.clone(),
                r.source.clone(),
                r.verb.clone(),
                r.objects.join(", "),
                outcome(r),
            ]);
        }
        t.render()
    })?;
    Ok(())
}
