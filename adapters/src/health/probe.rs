//! One probe of one check: exec, http or tcp, bounded by the check's
//! timeout.

use crate::process::spec::{DEFAULT_PATH, find_program};
use crate::sys::ChildSetup;
use bytes::Bytes;
use daros_coordinator::model::health::HealthCheck;
use http_body_util::Empty;
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::net::TcpStream;

/// Result of one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Healthy.
    Pass,
    /// Unhealthy, with what was seen.
    Fail(String),
}

/// How exec probes run: like the workload (its environment, directory,
/// user and cgroups), so that a probe sees what the workload sees and its
/// cost counts against it.
#[derive(Debug, Clone, Default)]
pub struct ExecContext {
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: Option<PathBuf>,
    /// User.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `cgroup.procs` files to join.
    pub cgroup_procs: Vec<PathBuf>,
}

/// Where http and tcp probes connect (the process runtime shares the
/// host's network).
pub const PROBE_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Runs one probe of `check`.
pub async fn run_probe(check: &HealthCheck, ctx: &ExecContext) -> ProbeOutcome {
    let timeout = Duration::from_millis(check.timeout.0.max(1));
    if let Some(e) = &check.exec {
        exec_probe(&e.command, ctx, timeout).await
    } else if let Some(h) = &check.http {
        if let Err(e) = own_listener(h.port, ctx).await {
            return ProbeOutcome::Fail(e);
        }
        http_probe(SocketAddr::new(PROBE_HOST, h.port), &h.path, timeout).await
    } else if let Some(t) = &check.tcp {
        if let Err(e) = own_listener(t.port, ctx).await {
            return ProbeOutcome::Fail(e);
        }
        tcp_probe(SocketAddr::new(PROBE_HOST, t.port), timeout).await
    } else {
        ProbeOutcome::Fail("the check names no probe".into())
    }
}

async fn exec_probe(argv: &[String], ctx: &ExecContext, timeout: Duration) -> ProbeOutcome {
    let Some((cmd, args)) = argv.split_first() else {
        return ProbeOutcome::Fail("empty command".into());
    };
    let path = ctx
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let program = match find_program(cmd, path) {
        Ok(p) => p,
        Err(e) => return ProbeOutcome::Fail(e),
    };
    let mut c = tokio::process::Command::new(program);
    c.args(args)
        .env_clear()
        .envs(ctx.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let setup = ChildSetup {
        cgroup_procs: ctx
            .cgroup_procs
            .iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
            .collect(),
        groups: ctx.groups.clone(),
        gid: ctx.gid,
        uid: ctx.uid,
        cwd: ctx
            .working_dir
            .as_ref()
            .and_then(|p| CString::new(p.as_os_str().as_bytes()).ok()),
        ..ChildSetup::default()
    };
    setup.install_tokio(&mut c);
    let child = match c.spawn() {
        Ok(c) => c,
        Err(e) => return ProbeOutcome::Fail(format!("cannot run {cmd}: {e}")),
    };
    let pgid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => ProbeOutcome::Pass,
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
            if text.trim().is_empty() {
                text = String::from_utf8_lossy(&out.stdout).into_owned();
            }
            let text: String = text.trim().chars().take(200).collect();
            ProbeOutcome::Fail(format!("{cmd} exited with {}: {text}", out.status))
        }
        Ok(Err(e)) => ProbeOutcome::Fail(format!("waiting for {cmd}: {e}")),
        Err(_) => {
            // The child was dropped (and killed); its descendants too.
            if let Some(p) = pgid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
            ProbeOutcome::Fail(format!("{cmd} timed out after {}ms", timeout.as_millis()))
        }
    }
}

/// The instance itself listens on `port` (see [`super::owner`]).
async fn own_listener(port: u16, ctx: &ExecContext) -> Result<(), String> {
    let procs = ctx.cgroup_procs.clone();
    tokio::task::spawn_blocking(move || super::owner::check_listener(port, &procs))
        .await
        .unwrap_or_else(|e| Err(format!("listener check did not run: {e}")))
}

async fn http_probe(addr: SocketAddr, path: &str, timeout: Duration) -> ProbeOutcome {
    let fut = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
            .await
            .map_err(|e| format!("http handshake with {addr}: {e}"))?;
        let conn = tokio::spawn(conn);
        let req = http::Request::get(path)
            .header(http::header::HOST, addr.to_string())
            .header(http::header::USER_AGENT, "daros-probe/1")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("bad request for path {path:?}: {e}"))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("GET {path} on {addr}: {e}"));
        conn.abort();
        let status = resp?.status();
        if status.is_success() || status.is_redirection() {
            Ok(())
        } else {
            Err(format!("GET {path} on {addr} answered {status}"))
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(())) => ProbeOutcome::Pass,
        Ok(Err(e)) => ProbeOutcome::Fail(e),
        Err(_) => ProbeOutcome::Fail(format!(
            "GET {path} on {addr} timed out after {}ms",
            timeout.as_millis()
        )),
    }
}

async fn tcp_probe(addr: SocketAddr, timeout: Duration) -> ProbeOutcome {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => ProbeOutcome::Pass,
        Ok(Err(e)) => ProbeOutcome::Fail(format!("connect {addr}: {e}")),
        Err(_) => ProbeOutcome::Fail(format!(
            "connect {addr} timed out after {}ms",
            timeout.as_millis()
        )),
    }
}
