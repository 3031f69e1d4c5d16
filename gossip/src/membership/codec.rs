//! Compression of gossip messages before sealing. Chitchat compresses deltas but not digests,
//! and a digest (about 45 bytes per member) is in every SYN; zstd halves it or better.
//! The codec byte travels inside the sealed (authenticated) payload.

use std::cell::RefCell;

const RAW: u8 = 0;
const ZSTD: u8 = 1;
/// Messages shorter than this are sent raw (not worth a zstd frame).
const MIN_COMPRESS: usize = 256;
/// Largest message a peer may make us inflate (the fragment limit of the sealed transport).
pub const MAX_MESSAGE: usize = 4 * super::seal::MAX_DATAGRAM;

/// Why a payload was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// Empty payload.
    #[error("empty gossip payload")]
    Empty,
    /// Unknown codec byte.
    #[error("unknown gossip codec {0}")]
    Unknown(u8),
    /// zstd refused the payload, or it inflates beyond the limit.
    #[error("gossip payload does not decompress within {MAX_MESSAGE} bytes: {0}")]
    Zstd(String),
}

thread_local! {
    // One zstd context per thread, reused: a fresh one per datagram (what
    // `zstd::bulk::compress` makes) allocated and freed hundreds of KiB each
    // time, most of the codec's cost in issue 18's 1,000-agent fleet bench.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        RefCell::new(zstd::bulk::Compressor::new(1).ok());
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        RefCell::new(zstd::bulk::Decompressor::new().ok());
}

fn compress(plain: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| match c.borrow_mut().as_mut() {
        Some(c) => c.compress(plain).ok(),
        None => zstd::bulk::compress(plain, 1).ok(),
    })
}

fn decompress(body: &[u8]) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|d| match d.borrow_mut().as_mut() {
        Some(d) => d.decompress(body, MAX_MESSAGE),
        None => zstd::bulk::decompress(body, MAX_MESSAGE),
    })
}

/// Codec byte + (maybe compressed) message.
pub fn encode(plain: &[u8]) -> Vec<u8> {
    let compressed = (plain.len() >= MIN_COMPRESS)
        .then(|| compress(plain))
        .flatten()
        .filter(|z| z.len() < plain.len());
    if let Some(z) = compressed {
        let mut out = Vec::with_capacity(z.len() + 1);
        out.push(ZSTD);
        out.extend_from_slice(&z);
        return out;
    }
    let mut out = Vec::with_capacity(plain.len() + 1);
    out.push(RAW);
    out.extend_from_slice(plain);
    out
}

/// The message back, inflating at most [`MAX_MESSAGE`] bytes.
pub fn decode(payload: &[u8]) -> Result<Vec<u8>, CodecError> {
    let (&codec, body) = payload.split_first().ok_or(CodecError::Empty)?;
    match codec {
        RAW => Ok(body.to_vec()),
        ZSTD => decompress(body).map_err(|e| CodecError::Zstd(e.to_string())),
        other => Err(CodecError::Unknown(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_compresses_repetitive_messages() {
        let small = b"hello".to_vec();
        assert_eq!(encode(&small)[0], RAW);
        assert_eq!(decode(&encode(&small)).unwrap(), small);
        let big: Vec<u8> = (0..4000).map(|i| (i % 7) as u8).collect();
        let e = encode(&big);
        assert_eq!(e[0], ZSTD);
        assert!(e.len() < big.len() / 4);
        assert_eq!(decode(&e).unwrap(), big);
    }

    #[test]
    fn bombs_and_garbage_are_refused() {
        let bomb = vec![0u8; MAX_MESSAGE + 1];
        let mut z = vec![ZSTD];
        z.extend(zstd::bulk::compress(&bomb, 1).unwrap());
        assert!(matches!(decode(&z), Err(CodecError::Zstd(_))));
        assert_eq!(decode(&[]), Err(CodecError::Empty));
        assert_eq!(decode(&[9, 1, 2]), Err(CodecError::Unknown(9)));
        assert!(decode(&[ZSTD, 1, 2, 3]).is_err());
        // The thread's reused contexts still work after a refusal.
        let big: Vec<u8> = (0..4000).map(|i| (i % 11) as u8).collect();
        assert_eq!(decode(&encode(&big)).unwrap(), big);
    }
}
