//! `darosctl logs <workload> [-f] [--tail N]`: stdout and stderr of an
//! instance, init job, or every replica of a workload on this node. With
//! `-f` the lines stream until interrupted (chunked NDJSON from darosd);
//! `-o json` prints one array, or with `-f` one object per line.

use std::io::Write;

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::CliError;
use super::output::OutputFormat;
use crate::api::logs::LogLineDoc;
use crate::client::{Client, ClientError, encode_id};

/// Arguments of `darosctl logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// `tenant/app/workload[/replica]`, `tenant/app/workload/replica/vN` or
    /// `tenant/app/workload/init/job/vN`.
    pub workload: String,
    /// Follow: print new lines as they are written.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines (all by default; 10 with -f).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

fn path(a: &LogsArgs) -> String {
    let mut p = format!("/v1/workloads/{}/logs", encode_id(&a.workload));
    let mut q = Vec::new();
    if let Some(n) = a.tail {
        q.push(format!("tail={n}"));
    }
    if a.follow {
        q.push("follow=true".into());
    }
    if !q.is_empty() {
        p.push('?');
        p.push_str(&q.join("&"));
    }
    p
}

// A full instance or job id names one stream; a workload may name several.
fn several(sel: &str) -> bool {
    sel.split('/').count() <= 4
}

fn print(
    line: &LogLineDoc,
    fmt: OutputFormat,
    prefix: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let r = match fmt {
        OutputFormat::Json | OutputFormat::Yaml => serde_json::to_string(line)
            .map_err(|e| CliError::Other(e.to_string()))
            .and_then(|s| writeln!(out, "{s}").map_err(|e| CliError::Other(e.to_string()))),
        _ if prefix => writeln!(out, "[{}] {}", line.instance, line.text)
            .map_err(|e| CliError::Other(e.to_string())),
        _ => writeln!(out, "{}", line.text).map_err(|e| CliError::Other(e.to_string())),
    };
    let _ = out.flush();
    r
}

/// Runs `darosctl logs`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: LogsArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let prefix = several(&a.workload);
    if !a.follow {
        let lines: Vec<LogLineDoc> = client.get(&path(&a)).await?;
        let doc = match fmt {
            OutputFormat::Json => {
                Some(serde_json::to_string_pretty(&lines).map_err(|e| e.to_string()))
            }
            OutputFormat::Yaml => Some(serde_yaml_ng::to_string(&lines).map_err(|e| e.to_string())),
            OutputFormat::Table => None,
        };
        if let Some(doc) = doc {
            let doc = doc.map_err(CliError::Other)?;
            return writeln!(out, "{}", doc.trim_end()).map_err(|e| CliError::Other(e.to_string()));
        }
        for l in &lines {
            print(l, fmt, prefix, out)?;
        }
        return Ok(());
    }
    follow(client, &path(&a), fmt, prefix, out).await
}

fn http(path: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Http {
        path: path.to_string(),
        reason: e.to_string(),
    }
}

// Streams the NDJSON answer line by line (the shared client waits for whole bodies).
async fn follow(
    client: &Client,
    path: &str,
    fmt: OutputFormat,
    prefix: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let stream = tokio::net::UnixStream::connect(client.socket())
        .await
        .map_err(|source| ClientError::Connect {
            socket: client.socket().to_path_buf(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(path, e))?;
    tokio::spawn(conn);
    let mut req = Request::get(path).header(hyper::header::HOST, "darosd");
    if let Some(a) = client.authorization() {
        req = req.header(hyper::header::AUTHORIZATION, a);
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| http(path, e))?;
    let resp = sender.send_request(req).await.map_err(|e| http(path, e))?;
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        let bytes = body.collect().await.map_err(|e| http(path, e))?.to_bytes();
        let message = serde_json::from_slice::<crate::api::error::ErrorBody>(&bytes)
            .map(|e| e.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        return Err(ClientError::Api {
            status: status.as_u16(),
            message,
        }
        .into());
    }
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| http(path, e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let l: LogLineDoc = serde_json::from_slice(&line).map_err(|e| ClientError::Decode {
                path: path.to_string(),
                reason: e.to_string(),
            })?;
            print(&l, fmt, prefix, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_prefixes() {
        let a = LogsArgs {
            workload: "acme/shop/web".into(),
            follow: true,
            tail: Some(5),
        };
        assert_eq!(
            path(&a),
            "/v1/workloads/acme/shop/web/logs?tail=5&follow=true"
        );
        assert!(several("acme/shop/web"));
        assert!(several("acme/shop/web/1"));
        assert!(!several("acme/shop/web/1/v2"));
        assert!(!several("acme/shop/web/init/migrate/v1"));
    }
}
