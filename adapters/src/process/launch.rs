//! Starting one run: write `shim.json`, start `daros-shim`, read its report
//! line. The shim detaches itself, so the agent never is the parent of a
//! workload and its death cannot take the workload down. Under systemd the
//! shim is a transient unit instead ([`super::systemd`]), and its report is
//! read from the run directory.

use super::protocol::{
    FAILED, LaunchFailure, SHIM_CONFIG, SHIM_LOG, STARTED, ShimConfig, ShimReport, StartedRecord,
    read_json, write_json_atomic,
};
use super::shim::DETACHED_FLAG;
use super::systemd::{Launcher, SystemdLauncher, unit_name};
use std::fs::{self, File};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Runs `shim` for `cfg` and waits up to `timeout` for its report.
pub async fn launch(
    shim: &Path,
    cfg: &ShimConfig,
    timeout: Duration,
    launcher: &Launcher,
) -> Result<StartedRecord, LaunchFailure> {
    let fail = |stage: &str, message: String| LaunchFailure {
        stage: stage.to_string(),
        errno: None,
        message,
    };
    fs::create_dir_all(&cfg.run_dir).map_err(|e| {
        fail(
            "create run directory",
            format!("{}: {e}", cfg.run_dir.display()),
        )
    })?;
    let cfg_path = cfg.run_dir.join(SHIM_CONFIG);
    write_json_atomic(&cfg_path, cfg)
        .map_err(|e| fail("write shim config", format!("{}: {e}", cfg_path.display())))?;
    let shim_log = File::create(cfg.run_dir.join(SHIM_LOG))
        .map_err(|e| fail("create shim log", e.to_string()))?;
    if let Launcher::Systemd(sd) = launcher {
        return launch_unit(sd, shim, cfg, &cfg_path, timeout).await;
    }
    let mut child = tokio::process::Command::new(shim)
        .arg(&cfg_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(shim_log)
        .current_dir("/")
        .spawn()
        .map_err(|e| LaunchFailure {
            stage: "spawn shim".into(),
            errno: e.raw_os_error(),
            message: format!("{}: {e}", shim.display()),
        })?;
    let stdout = child.stdout.take();
    let read = async {
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = BufReader::new(out).read_line(&mut line).await;
        }
        // The first stage exits right after starting the detached one.
        let _ = child.wait().await;
        line
    };
    let line = tokio::time::timeout(timeout, read)
        .await
        .unwrap_or_default();
    if let Ok(report) = serde_json::from_str::<ShimReport>(line.trim()) {
        return match report {
            ShimReport::Started(s) => Ok(s),
            ShimReport::Failed(f) => Err(f),
        };
    }
    // No report line: the files still say what happened.
    if let Ok(Some(s)) = read_json::<StartedRecord>(&cfg.run_dir.join(STARTED)) {
        return Ok(s);
    }
    if let Ok(Some(f)) = read_json::<LaunchFailure>(&cfg.run_dir.join(FAILED)) {
        return Err(f);
    }
    let log = fs::read_to_string(cfg.run_dir.join(SHIM_LOG)).unwrap_or_default();
    Err(fail(
        "shim report",
        format!(
            "the shim sent no report within {}ms; shim log: {}",
            timeout.as_millis(),
            log.trim()
        ),
    ))
}

/// The shim's detached stage as a transient unit; its report is the run
/// directory's `started.json` or `failed.json`.
async fn launch_unit(
    sd: &SystemdLauncher,
    shim: &Path,
    cfg: &ShimConfig,
    cfg_path: &Path,
    timeout: Duration,
) -> Result<StartedRecord, LaunchFailure> {
    let unit = unit_name(&cfg.id, cfg.generation);
    let argv = vec![
        shim.display().to_string(),
        DETACHED_FLAG.to_string(),
        cfg_path.display().to_string(),
    ];
    sd.start(&unit, &format!("daros workload {}", cfg.id), &argv)
        .await
        .map_err(|message| LaunchFailure {
            stage: "start shim unit".into(),
            errno: None,
            message,
        })?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = read_json::<StartedRecord>(&cfg.run_dir.join(STARTED)) {
            return Ok(s);
        }
        if let Ok(Some(f)) = read_json::<LaunchFailure>(&cfg.run_dir.join(FAILED)) {
            return Err(f);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LaunchFailure {
                stage: "shim report".into(),
                errno: None,
                message: format!(
                    "the shim of unit {unit} wrote no report within {}ms (journalctl -u {unit})",
                    timeout.as_millis()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
