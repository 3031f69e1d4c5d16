//! hyper answers a request it cannot parse by itself, before any handler
//! runs, with a status and an empty body (400 for a malformed request line or
//! header, 414 for an over-long URI, 431 for an over-large head) and no hook
//! to change it. So that every error a client sees has the API's one JSON
//! shape, the connection's write side recognises exactly those automatic
//! answers (a 400/414/431 status line, a head with no `content-type` and
//! nothing after it) and writes the same status with a JSON body instead.
//! Every response a handler produces carries `content-type`, so none is
//! mistaken for one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ErrorBody;

/// A connection whose automatic parse-error answers carry a JSON body.
#[derive(Debug)]
pub struct JsonParseErrors<T> {
    inner: T,
    pending: Option<Rewritten>,
}

/// A rewritten answer part-way written: the caller is told its own bytes were
/// written only once all of the replacement is.
#[derive(Debug)]
struct Rewritten {
    bytes: Vec<u8>,
    written: usize,
    claimed: usize,
}

impl<T> JsonParseErrors<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        JsonParseErrors {
            inner,
            pending: None,
        }
    }
}

/// The JSON replacement for `buf` if it is one of hyper's automatic answers.
pub fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    let (status, reason, message) = if buf.starts_with(b"HTTP/1.1 400 Bad Request\r\n") {
        (
            400,
            "Bad Request",
            "the request is not valid HTTP/1.1 (its request line or a header could not be parsed)"
                .to_string(),
        )
    } else if buf.starts_with(b"HTTP/1.1 414 URI Too Long\r\n") {
        (
            414,
            "URI Too Long",
            "the request URI is too long".to_string(),
        )
    } else if buf.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") {
        (
            431,
            "Request Header Fields Too Large",
            super::limits::head_too_large(),
        )
    } else {
        return None;
    };
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if head_end != buf.len() || head.contains("\r\ncontent-type:") {
        return None;
    }
    let body = serde_json::to_vec(&ErrorBody {
        error: message,
        status,
    })
    .ok()?;
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let JsonParseErrors { inner, pending } = self.get_mut();
        if pending.is_none() {
            match rewrite(buf) {
                Some(bytes) => {
                    *pending = Some(Rewritten {
                        bytes,
                        written: 0,
                        claimed: buf.len(),
                    })
                }
                None => return Pin::new(inner).poll_write(cx, buf),
            }
        }
        let Some(p) = pending.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        while p.written < p.bytes.len() {
            let n = ready!(Pin::new(&mut *inner).poll_write(cx, &p.bytes[p.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            p.written += n;
        }
        let claimed = p.claimed;
        *pending = None;
        Poll::Ready(Ok(claimed))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    /// Not vectored, so that hyper hands each response over as one buffer
    /// and an automatic answer is always seen whole.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_answers_are_rewritten() {
        let auto =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(rewrite(auto).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
        let (_, body) = out.split_once("\r\n\r\n").unwrap();
        let b: ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(b.status, 431);
        assert!(b.error.contains("65536 bytes"), "{}", b.error);
        // A handler's own 400 has a content type and a body: left alone.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        assert!(rewrite(ours).is_none());
        assert!(rewrite(b"HTTP/1.1 200 OK\r\n\r\n").is_none());
        // Something after the head (another response) is not hyper's answer.
        let two = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
        assert!(rewrite(two).is_none());
    }
}
