//! Lower-case hex for keys, secrets and fingerprints.

/// Hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Decodes hex of any even length (`None` when not hex).
pub fn decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Some((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}

/// Decodes exactly 32 bytes of hex.
pub fn decode32(s: &str) -> Result<[u8; 32], crate::membership::SealError> {
    let s = s.trim();
    if s.len() != 64 {
        return Err(crate::membership::SealError::KeyLength(s.len()));
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.as_bytes().chunks(2).enumerate() {
        let hi = nibble(pair[0]).ok_or(crate::membership::SealError::KeyHex)?;
        let lo = nibble(pair[1]).ok_or(crate::membership::SealError::KeyHex)?;
        out[i] = (hi << 4) | lo;
    }
    Ok(out)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let b: [u8; 32] = core::array::from_fn(|i| (i * 7) as u8);
        assert_eq!(super::decode32(&super::encode(&b)).unwrap(), b);
        assert!(super::decode32("zz").is_err());
        assert!(super::decode32(&"g".repeat(64)).is_err());
    }
}
