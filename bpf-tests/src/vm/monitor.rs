//! QEMU's human monitor (HMP) on a unix socket: how the runner looks inside a guest
//! that stopped making progress (its vCPUs' instruction pointers) and makes it speak
//! (an NMI, on which the guest kernel panics and replays its log on the console).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What HMP prints when it waits for a command.
const PROMPT: &[u8] = b"(qemu) ";

/// A unix socket path must fit `sun_path` (108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Whether `path` can be a unix socket's address.
pub fn fits(path: &Path) -> bool {
    path.as_os_str().len() <= MAX_SOCKET_PATH
}

/// The `-monitor` value for a socket at `path` that QEMU creates and does not wait on.
pub fn qemu_arg(path: &Path) -> std::ffi::OsString {
    let mut a = std::ffi::OsString::from("unix:");
    a.push(path.as_os_str().to_string_lossy().replace(',', ",,"));
    a.push(",server=on,wait=off");
    a
}

/// Runs one HMP command and returns what it printed (without the echo and prompt).
/// The whole exchange is bounded by `within`.
pub fn command(socket: &Path, cmd: &str, within: Duration) -> std::io::Result<String> {
    let deadline = Instant::now() + within;
    let mut s = UnixStream::connect(socket)?;
    read_to_prompt(&mut s, deadline)?;
    s.write_all(cmd.as_bytes())?;
    s.write_all(b"\n")?;
    let out = read_to_prompt(&mut s, deadline)?;
    Ok(clean(&out, cmd))
}

fn read_to_prompt(s: &mut UnixStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while !out.ends_with(PROMPT) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the qemu monitor did not answer in time",
            ));
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut buf).map_err(|e| match e.kind() {
            // How a read timeout shows on a unix socket.
            std::io::ErrorKind::WouldBlock => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the qemu monitor did not answer in time",
            ),
            _ => e,
        })?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// HMP output without terminal escapes, carriage returns, the echoed command and
/// the trailing prompt.
fn clean(raw: &[u8], cmd: &str) -> String {
    let text = String::from_utf8_lossy(raw.strip_suffix(PROMPT).unwrap_or(raw));
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            // CSI sequences (`ESC [ ... final byte`), which HMP uses to redraw its line.
            '\u{1b}' => {
                if chars.next() == Some('[') {
                    for f in chars.by_ref() {
                        if ('@'..='~').contains(&f) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => plain.push(c),
        }
    }
    plain
        .lines()
        // The echo of the typed command, however HMP redrew it.
        .filter(|l| !l.contains(cmd) && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each vCPU's instruction pointer and flags, from `info registers -a`: enough to
/// tell a guest spinning or halted in the kernel from one that never ran.
pub fn cpu_lines(registers: &str) -> String {
    registers
        .lines()
        .filter(|l| l.starts_with("CPU#") || l.starts_with("RIP="))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_command_gets_its_answer_without_echo_escapes_or_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("m.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            c.write_all(b"QEMU 9.2 monitor - type 'help'\r\n(qemu) ")
                .unwrap();
            let mut line = Vec::new();
            let mut b = [0u8; 1];
            while !line.ends_with(b"\n") {
                c.read_exact(&mut b).unwrap();
                line.push(b[0]);
            }
            assert_eq!(line, b"info cpus\n");
            c.write_all(b"i\x1b[K\x1b[Dinfo cpus\r\n* CPU #0: thread_id=7\r\n  CPU #1: thread_id=8\r\n(qemu) ")
                .unwrap();
        });
        let out = command(&sock, "info cpus", Duration::from_secs(10)).unwrap();
        server.join().unwrap();
        assert_eq!(out, "* CPU #0: thread_id=7\n  CPU #1: thread_id=8");
    }

    #[test]
    fn a_silent_monitor_is_a_timeout_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("m.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let held = std::thread::spawn(move || listener.accept().map(|(c, _)| c));
        let t0 = Instant::now();
        let err = command(&sock, "nmi", Duration::from_millis(300)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        drop(held.join());
    }

    #[test]
    fn cpu_lines_keep_each_vcpus_instruction_pointer() {
        let regs = "CPU#0\nRAX=0 RBX=0\nRIP=ffffffff81e0b1cf RFL=00000246 [---Z-P-] CPL=0\nES =0000\nCPU#1\nRIP=ffffffff81e0b1cf RFL=00000246\n";
        assert_eq!(
            cpu_lines(regs),
            "CPU#0\nRIP=ffffffff81e0b1cf RFL=00000246 [---Z-P-] CPL=0\nCPU#1\nRIP=ffffffff81e0b1cf RFL=00000246"
        );
    }

    #[test]
    fn socket_paths_are_escaped_and_bounded() {
        assert_eq!(
            qemu_arg(Path::new("/tmp/a,b/m.sock")),
            "unix:/tmp/a,,b/m.sock,server=on,wait=off"
        );
        assert!(fits(Path::new("/tmp/x/m.sock")));
        assert!(!fits(&Path::new("/").join("d".repeat(120))));
    }
}
