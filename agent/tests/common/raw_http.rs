//! Raw HTTP/1.1 over the API's unix socket, byte by byte: what a client sees
//! on the wire, for tests and benches of the API's edges.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Sends `request` (errors writing are ignored: the server may answer and
/// close before reading it all) and reads the whole answer.
pub fn exchange(socket: &Path, request: &[u8]) -> (u16, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(request);
    read_answer(&mut s)
}

/// Status and body of the one answer on `s` (read until the server closes
/// or the body is complete).
pub fn read_answer(s: &mut UnixStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "reading the answer: {e} (got {:?})",
                String::from_utf8_lossy(&buf)
            ),
        }
        if let Some((head, body)) = split(&buf)
            && let Some(len) = content_length(&head)
            && body.len() >= len
        {
            break;
        }
    }
    let (head, body) = split(&buf).unwrap_or_else(|| panic!("no HTTP answer: {buf:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line: {head}"));
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn split(buf: &[u8]) -> Option<(String, Vec<u8>)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((
        String::from_utf8_lossy(&buf[..end]).into_owned(),
        buf[end + 4..].to_vec(),
    ))
}

fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    })
}

pub fn healthz(socket: &Path) -> (u16, String) {
    exchange(
        socket,
        b"GET /healthz HTTP/1.1\r\nHost: darosd\r\nConnection: close\r\n\r\n",
    )
}

pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: darosd\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}
