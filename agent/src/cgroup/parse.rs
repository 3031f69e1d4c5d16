//! Allocation-free parsers for the cgroup and proc file formats.
//!
//! Formats (Documentation/admin-guide/cgroup-v2.rst "Interface Files"):
//! single value (`123\n` or `max`), flat keyed (`key value` per line) and
//! nested keyed (`head k1=v1 k2=v2` per line).

/// Parses a file holding one unsigned integer; `max` means unlimited (`u64::MAX`).
pub fn single_u64(buf: &[u8]) -> Option<u64> {
    let s = trim(buf);
    if s == b"max" {
        return Some(u64::MAX);
    }
    parse_u64(s)
}

/// Parses decimal ASCII digits.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Parses a decimal number with an optional fraction (`12.34`).
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    std::str::from_utf8(s).ok()?.parse::<f64>().ok()
}

fn trim(buf: &[u8]) -> &[u8] {
    let start = buf
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(buf.len());
    let end = buf
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &buf[start..end]
}

/// Calls `f(key, value)` for every `key value` line whose value is an integer.
pub fn flat_keyed(buf: &[u8], mut f: impl FnMut(&[u8], u64)) {
    for line in buf.split(|&c| c == b'\n') {
        let mut parts = line.split(|&c| c == b' ').filter(|p| !p.is_empty());
        if let (Some(k), Some(v)) = (parts.next(), parts.next())
            && let Some(v) = parse_u64(v)
        {
            f(k, v);
        }
    }
}

/// Calls `f(head, key, value)` for every `key=value` pair of every nested keyed line.
pub fn nested_keyed(buf: &[u8], mut f: impl FnMut(&[u8], &[u8], &[u8])) {
    for line in buf.split(|&c| c == b'\n') {
        let mut parts = line.split(|&c| c == b' ').filter(|p| !p.is_empty());
        let Some(head) = parts.next() else { continue };
        for kv in parts {
            if let Some(eq) = kv.iter().position(|&c| c == b'=') {
                f(head, &kv[..eq], &kv[eq + 1..]);
            }
        }
    }
}

/// Parses a `MAJ:MIN` device number.
pub fn parse_dev(s: &[u8]) -> Option<(u32, u32)> {
    let colon = s.iter().position(|&c| c == b':')?;
    let major = u32::try_from(parse_u64(&s[..colon])?).ok()?;
    let minor = u32::try_from(parse_u64(&s[colon + 1..])?).ok()?;
    Some((major, minor))
}

/// One line of a PSI file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    /// Share of wall time stalled over the last 10 s, in percent.
    pub avg10: f64,
    /// Over the last 60 s, in percent.
    pub avg60: f64,
    /// Over the last 300 s, in percent.
    pub avg300: f64,
    /// Total stall time in microseconds.
    pub total_us: u64,
}

/// Parsed PSI file (`some` and, where the kernel reports it, `full`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Psi {
    /// Some tasks stalled.
    pub some: PsiLine,
    /// All non-idle tasks stalled (absent for cpu before 5.13 and at the root).
    pub full: Option<PsiLine>,
}

/// Parses a `*.pressure` / `/proc/pressure/*` file.
pub fn psi(buf: &[u8]) -> Option<Psi> {
    let mut some = None;
    let mut full = None;
    for line in buf.split(|&c| c == b'\n') {
        let mut parts = line.split(|&c| c == b' ').filter(|p| !p.is_empty());
        let slot = match parts.next() {
            Some(b"some") => &mut some,
            Some(b"full") => &mut full,
            _ => continue,
        };
        let mut cur = PsiLine::default();
        let mut fields = 0;
        for kv in parts {
            let Some(eq) = kv.iter().position(|&c| c == b'=') else {
                continue;
            };
            let (k, v) = (&kv[..eq], &kv[eq + 1..]);
            match k {
                b"avg10" => cur.avg10 = parse_f64(v)?,
                b"avg60" => cur.avg60 = parse_f64(v)?,
                b"avg300" => cur.avg300 = parse_f64(v)?,
                b"total" => cur.total_us = parse_u64(v)?,
                _ => continue,
            }
            fields += 1;
        }
        if fields == 4 {
            *slot = Some(cur);
        }
    }
    Some(Psi { some: some?, full })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_values() {
        assert_eq!(single_u64(b"42\n"), Some(42));
        assert_eq!(single_u64(b"max\n"), Some(u64::MAX));
        assert_eq!(single_u64(b""), None);
        assert_eq!(single_u64(b"-1"), None);
        assert_eq!(single_u64(b"99999999999999999999999"), None);
    }

    #[test]
    fn flat_keyed_reads_pairs() {
        let mut got = Vec::new();
        flat_keyed(
            b"usage_usec 10\nuser_usec 7\nbogus\nsystem_usec x\n",
            |k, v| got.push((String::from_utf8_lossy(k).into_owned(), v)),
        );
        assert_eq!(
            got,
            vec![("usage_usec".to_string(), 10), ("user_usec".to_string(), 7)]
        );
    }

    #[test]
    fn nested_keyed_reads_io_stat() {
        let text = b"8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n";
        let mut n = 0;
        nested_keyed(text, |head, k, v| {
            assert_eq!(parse_dev(head), Some((8, 16)));
            if k == b"wbytes" {
                assert_eq!(parse_u64(v), Some(314773504));
            }
            n += 1;
        });
        assert_eq!(n, 6);
    }

    #[test]
    fn psi_with_and_without_full() {
        let p = psi(b"some avg10=4.44 avg60=3.81 avg300=3.60 total=30351486\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(p.some.total_us, 30351486);
        assert!((p.some.avg10 - 4.44).abs() < 1e-9);
        assert_eq!(p.full.unwrap().total_us, 0);
        let p = psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").unwrap();
        assert!(p.full.is_none());
        assert!(psi(b"garbage").is_none());
    }
}
