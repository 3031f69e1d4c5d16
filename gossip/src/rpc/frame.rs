//! Frames: `[version u8][length u32 BE][JSON]`. The length is checked against the limit before
//! anything is allocated.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::error::{ErrorCode, RpcError};

/// Wire format version spoken by this build.
pub const WIRE_VERSION: u8 = 1;
const HEADER: usize = 5;

/// Default hard limit on one frame.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Encodes one frame.
pub fn encode<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, RpcError> {
    let body = serde_json::to_vec(msg)
        .map_err(|e| RpcError::internal(format!("encoding a message: {e}")))?;
    if body.len() > max {
        return Err(RpcError::new(
            ErrorCode::TooLarge,
            format!(
                "message of {} bytes exceeds the {max} byte limit",
                body.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.push(WIRE_VERSION);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Writes one frame.
pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
    max: usize,
) -> Result<(), RpcError> {
    let bytes = encode(msg, max)?;
    w.write_all(&bytes)
        .await
        .map_err(|e| RpcError::transport(format!("writing a frame: {e}")))
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a header.
pub async fn read<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
) -> Result<Option<T>, RpcError> {
    let mut header = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        let n = r
            .read(&mut header[got..])
            .await
            .map_err(|e| RpcError::transport(format!("reading a frame header: {e}")))?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(RpcError::transport("stream ended inside a frame header"));
        }
        got += n;
    }
    if header[0] != WIRE_VERSION {
        return Err(RpcError::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "peer speaks wire version {}, this node speaks {WIRE_VERSION}",
                header[0]
            ),
        ));
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > max {
        return Err(RpcError::new(
            ErrorCode::TooLarge,
            format!("frame of {len} bytes exceeds the {max} byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .await
        .map_err(|e| RpcError::transport(format!("reading a frame body: {e}")))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| RpcError::bad_request(format!("message does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip() {
        let bytes = encode(&serde_json::json!({"a": 1}), 1024).unwrap();
        let mut r: &[u8] = &bytes;
        let v: serde_json::Value = read(&mut r, 1024).await.unwrap().unwrap();
        assert_eq!(v["a"], 1);
        let none: Option<serde_json::Value> = read(&mut r, 1024).await.unwrap();
        assert!(none.is_none());
    }

    #[tokio::test]
    async fn oversize_is_refused_before_reading_the_body() {
        // Header claims 4 GiB; no body follows. Must fail on the header alone.
        let mut r: &[u8] = &[WIRE_VERSION, 0xff, 0xff, 0xff, 0xff];
        let e = read::<_, serde_json::Value>(&mut r, 1024)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        let e = encode(&"x".repeat(2000), 1024).unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
    }

    #[tokio::test]
    async fn other_versions_and_garbage_are_refused() {
        let mut r: &[u8] = &[2, 0, 0, 0, 2, b'{', b'}'];
        let e = read::<_, serde_json::Value>(&mut r, 1024)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::UnsupportedVersion);
        let mut r: &[u8] = &[WIRE_VERSION, 0, 0, 0, 3, b'{', b'x', b'}'];
        let e = read::<_, serde_json::Value>(&mut r, 1024)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        let mut r: &[u8] = &[WIRE_VERSION, 0];
        let e = read::<_, serde_json::Value>(&mut r, 1024)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Transport);
    }
}
