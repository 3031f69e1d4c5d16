//! A small HTTP server for rollout tests that shares its port with its other
//! copies (`SO_REUSEPORT`) and steers new connections to the newest socket of
//! the group (a one-instruction classic BPF program,
//! `SO_ATTACH_REUSEPORT_CBPF`), so that an old copy's accept queue is empty
//! when it is stopped; and a poller that requests the port back to back.
//! The server answers `version $VERSION`; on SIGTERM it exits after the
//! request at hand (or at once when idle); with `CRASH` set it exits 3 at
//! start, with `CRASH_AFTER=<s>` after that many seconds of serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::http_get;

/// The server (`python3 server.py PORT`).
pub const SERVER: &str = r#"
import ctypes, os, signal, socket, struct, sys, time
if os.environ.get("CRASH"):
    sys.exit(3)
crash_at = time.time() + float(os.environ.get("CRASH_AFTER", "inf"))
port, version = int(sys.argv[1]), os.environ["VERSION"]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", port))
s.listen(128)
# Steer every new connection to socket 1 of the group: the newest while two
# copies run; out of range (the kernel then hashes) while one runs.
insn = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 1))
prog = struct.pack("HL", 1, ctypes.addressof(insn))
s.setsockopt(socket.SOL_SOCKET, 51, prog)  # SO_ATTACH_REUSEPORT_CBPF
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
s.settimeout(0.05)
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        if stopping:
            break
        if time.time() > crash_at:
            sys.exit(3)
        continue
    c.settimeout(2)
    try:
        c.recv(4096)
        c.sendall(("HTTP/1.0 200 OK\r\n\r\nversion " + version + "\n").encode())
    finally:
        c.close()
    if stopping:
        break
"#;

/// The version the port answers with, if it answers.
pub fn served(port: u16) -> Option<String> {
    http_get(port, "/", Duration::from_secs(2))?
        .lines()
        .find_map(|l| l.strip_prefix("version "))
        .map(str::to_string)
}

/// What one request met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This version answered.
    Version(String),
    /// Nothing listened on the port (no instance at all).
    Refused,
    /// Anything else: a reset from a listener that closed with the
    /// connection in its queue, a timeout, a malformed answer.
    Failed(String),
}

/// One request on a fresh connection.
pub fn ask(port: u16) -> Answer {
    use std::io::{ErrorKind, Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Ok(s) => s,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Answer::Refused,
        Err(e) => return Answer::Failed(format!("connect: {e}")),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut text = String::new();
    let r = s
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .and_then(|()| s.read_to_string(&mut text));
    match r {
        Err(e) => Answer::Failed(format!("{:?}: {e}", e.kind())),
        Ok(_) => text
            .lines()
            .find_map(|l| l.strip_prefix("version "))
            .map_or_else(
                || Answer::Failed(format!("no version in {text:?}")),
                |v| Answer::Version(v.to_string()),
            ),
    }
}

/// What a [`Poller`] saw.
#[derive(Debug, Clone, Default)]
pub struct Polled {
    /// Requests made (first tries).
    pub requests: u32,
    /// First tries that got no answer.
    pub failed: u32,
    /// Tries (first or second) refused: no listener at all at that moment.
    pub refused: u32,
    /// Requests that got no answer on a second, immediate try either.
    pub unanswered: u32,
    /// What the first tries that failed met (at most 10).
    pub failures: Vec<String>,
    /// The versions that answered, in order, each change once.
    pub seen: Vec<String>,
}

/// Requests the port back to back in the background (a fresh connection
/// each), retrying a failed request once at once, as a load balancer would.
pub struct Poller {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Polled>,
}

impl Poller {
    /// Starts polling `port`.
    pub fn start(port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut p = Polled::default();
            while !s.load(Ordering::SeqCst) {
                p.requests += 1;
                let mut answer = ask(port);
                if !matches!(answer, Answer::Version(_)) {
                    p.failed += 1;
                    if p.failures.len() < 10 {
                        p.failures.push(format!("{answer:?}"));
                    }
                    if answer == Answer::Refused {
                        p.refused += 1;
                    }
                    answer = ask(port);
                    if answer == Answer::Refused {
                        p.refused += 1;
                    }
                }
                match answer {
                    Answer::Version(v) => {
                        if p.seen.last() != Some(&v) {
                            p.seen.push(v);
                        }
                    }
                    _ => p.unanswered += 1,
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            p
        });
        Poller { stop, thread }
    }

    /// Stops polling: what was seen.
    pub fn stop(self) -> Polled {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}
