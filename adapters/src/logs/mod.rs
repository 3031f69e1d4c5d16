//! Workload logs: stdout and stderr merged into one size-rotated file per
//! instance (`output.log`, `output.log.1`, ...), one record per line in the
//! CRI format kubelet uses (`<RFC3339Nano> <stdout|stderr> <F|P> <text>`),
//! so that both streams keep their order and time and a line written
//! without its newline yet (a prompt) is still shown.
//!
//! [`writer`] runs inside the shim; [`reader`] serves `darosctl logs [-f]`.

pub mod reader;
pub mod writer;

use crate::time::{parse_rfc3339_nanos, rfc3339_nanos};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

pub use reader::{LogFollower, join_partials, read_tail};
pub use writer::{LogLimits, RotatingLog};

/// File name of the current log file in an instance's log directory.
pub const LOG_FILE: &str = "output.log";

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// When the shim read it, in nanoseconds since the epoch.
    #[serde(serialize_with = "ser_time")]
    pub time: u128,
    /// stdout or stderr.
    pub stream: OutputStream,
    /// The text continues in the next record of the same stream (it was
    /// read without its newline, or was too long for one record).
    pub partial: bool,
    /// The text, without its newline (invalid UTF-8 replaced).
    pub text: String,
}

fn ser_time<S: Serializer>(t: &u128, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_nanos(*t))
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            rfc3339_nanos(self.time),
            self.stream.as_str(),
            self.text
        )
    }
}

/// Encodes one record (with its trailing newline).
pub fn encode(time: u128, stream: OutputStream, partial: bool, text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 48);
    encode_into(&mut out, &rfc3339_nanos(time), stream, partial, text);
    out
}

/// Appends one record with the already formatted time `ts` to `out`.
pub fn encode_into(out: &mut Vec<u8>, ts: &str, stream: OutputStream, partial: bool, text: &[u8]) {
    out.extend_from_slice(ts.as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.extend_from_slice(if partial { b" P " } else { b" F " });
    out.extend_from_slice(text);
    out.push(b'\n');
}

/// Decodes one record (without its newline); `None` for a line that is not
/// a record (a file not written by the shim).
pub fn decode(line: &[u8]) -> Option<LogLine> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = parse_rfc3339_nanos(std::str::from_utf8(parts.next()?).ok()?)?;
    let stream = match parts.next()? {
        b"stdout" => OutputStream::Stdout,
        b"stderr" => OutputStream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()? {
        b"F" => false,
        b"P" => true,
        _ => return None,
    };
    let text = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    Some(LogLine {
        time,
        stream,
        partial,
        text,
    })
}

impl<'de> Deserialize<'de> for LogLine {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            time: String,
            stream: OutputStream,
            partial: bool,
            text: String,
        }
        let r = Raw::deserialize(d)?;
        let time = parse_rfc3339_nanos(&r.time)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid time {:?}", r.time)))?;
        Ok(LogLine {
            time,
            stream: r.stream,
            partial: r.partial,
            text: r.text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let rec = encode(
            1_700_000_000_123_456_789,
            OutputStream::Stderr,
            true,
            b"a b  c",
        );
        assert_eq!(
            std::str::from_utf8(&rec).unwrap(),
            "2023-11-14T22:13:20.123456789Z stderr P a b  c\n"
        );
        let l = decode(&rec[..rec.len() - 1]).unwrap();
        assert_eq!(l.stream, OutputStream::Stderr);
        assert!(l.partial);
        assert_eq!(l.text, "a b  c");
        let empty = encode(1, OutputStream::Stdout, false, b"");
        assert_eq!(decode(&empty[..empty.len() - 1]).unwrap().text, "");
        assert!(decode(b"hello world").is_none());
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(serde_json::from_str::<LogLine>(&json).unwrap(), l);
    }
}
