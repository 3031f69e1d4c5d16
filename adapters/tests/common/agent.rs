//! Drives a supervisor binary (the adapter harness, or later darosd) as a
//! separate process that tests can `kill -9`: reads its JSON lines on a
//! thread and waits on them with deadlines.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary standing in for darosd: `DAROS_SUPERVISOR_BIN` when set
/// (the end-to-end tests point it at darosd), else the adapter harness.
pub fn supervisor_bin() -> PathBuf {
    std::env::var_os("DAROS_SUPERVISOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_daros-adapter-harness")))
}

pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Agent {
    /// Starts `bin` on `state`, creating and starting `specs`.
    pub fn start(bin: &Path, state: &Path, shim: &Path, specs: &[PathBuf]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.arg("--state")
            .arg(state)
            .arg("--shim")
            .arg(shim)
            .arg("--grace-ms")
            .arg("1000");
        for s in specs {
            cmd.arg("--spec").arg(s);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut me = Self {
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
        };
        me.wait_for(Duration::from_secs(30), "the agent to be ready", |v| {
            v.get("harness").is_some()
        });
        me
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line matching `pred` (taking it from the lines already
    /// seen first); lines that do not match are kept in `seen`.
    pub fn wait_for(
        &mut self,
        within: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(i) = self.seen.iter().position(&pred) {
            return self.seen.remove(i);
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) if pred(&v) => return v,
                Ok(v) => self.seen.push(v),
                Err(_) => panic!("timed out waiting for {what}; saw {:#?}", self.seen),
            }
        }
    }

    /// Waits for an event of `kind` about instance `id`.
    pub fn wait_event(&mut self, id: &str, kind: &str) -> Value {
        self.wait_for(Duration::from_secs(30), &format!("{kind} of {id}"), |v| {
            v["event"]["id"] == id && v["event"]["kind"] == kind
        })["event"]
            .clone()
    }

    /// Sends a command line; returns its reply (the next non-event line).
    pub fn command(&mut self, line: &str) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.wait_for(Duration::from_secs(60), line, |v| v.get("event").is_none())
    }

    /// `kill -9`, and reap it.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
