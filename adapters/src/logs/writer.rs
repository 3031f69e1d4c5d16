//! The shim's side: turns chunks read from the workload's pipes into
//! records and appends them to `output.log`, rotating it by size.

use super::{LOG_FILE, OutputStream, encode_into};
use crate::time::rfc3339_nanos;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A line longer than this is cut into partial records.
pub const MAX_RECORD_TEXT: usize = 16 * 1024;

/// Size rotation limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLimits {
    /// A file is rotated before it would grow past this size.
    pub max_bytes: u64,
    /// Files kept: `output.log` and `output.log.1` .. `.{max_files-1}`.
    pub max_files: u32,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            max_bytes: 10 * 1024 * 1024,
            max_files: 5,
        }
    }
}

/// Path of rotated file `n` (0 = the current file).
pub fn log_path(dir: &Path, n: u32) -> PathBuf {
    if n == 0 {
        dir.join(LOG_FILE)
    } else {
        dir.join(format!("{LOG_FILE}.{n}"))
    }
}

/// An appending, size-rotated log file.
#[derive(Debug)]
pub struct RotatingLog {
    dir: PathBuf,
    limits: LogLimits,
    file: File,
    size: u64,
    // Text read without its newline yet, per stream (stdout, stderr).
    pending: [Vec<u8>; 2],
    // Records encoded but not written yet (one write per chunk read).
    out: Vec<u8>,
    // The last time formatted, reused for every line of a chunk.
    ts: (u128, String),
}

impl RotatingLog {
    /// Opens (creating) `dir/output.log` for appending.
    pub fn open(dir: &Path, limits: LogLimits) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let file = open_append(&log_path(dir, 0))?;
        let size = file.metadata()?.len();
        Ok(Self {
            dir: dir.to_path_buf(),
            limits: LogLimits {
                max_bytes: limits.max_bytes.max(1024),
                max_files: limits.max_files.max(1),
            },
            file,
            size,
            pending: [Vec::new(), Vec::new()],
            out: Vec::with_capacity(128 * 1024),
            ts: (0, rfc3339_nanos(0)),
        })
    }

    /// Appends what was read from `stream` at `now`: every complete line is
    /// a record; the rest waits for its newline (see [`Self::flush_partial`]).
    pub fn write(&mut self, stream: OutputStream, data: &[u8], now: u128) -> io::Result<()> {
        let idx = stream as usize;
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let mut line = std::mem::take(&mut self.pending[idx]);
            line.extend_from_slice(&rest[..nl]);
            rest = &rest[nl + 1..];
            self.emit_line(stream, &line, false, now)?;
        }
        self.pending[idx].extend_from_slice(rest);
        while self.pending[idx].len() >= MAX_RECORD_TEXT {
            let head: Vec<u8> = self.pending[idx].drain(..MAX_RECORD_TEXT).collect();
            self.append(now, stream, true, &head)?;
        }
        self.flush_out()
    }

    /// Writes text still waiting for its newline as partial records, so a
    /// prompt or progress output shows up without its line end.
    pub fn flush_partial(&mut self, now: u128) -> io::Result<()> {
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let idx = stream as usize;
            if !self.pending[idx].is_empty() {
                let text = std::mem::take(&mut self.pending[idx]);
                self.append(now, stream, true, &text)?;
            }
        }
        self.flush_out()
    }

    /// True when some text waits for its newline.
    pub fn has_pending(&self) -> bool {
        self.pending.iter().any(|p| !p.is_empty())
    }

    /// Ends the log: pending text becomes a final record, data is synced.
    pub fn finish(&mut self, now: u128) -> io::Result<()> {
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let idx = stream as usize;
            if !self.pending[idx].is_empty() {
                let text = std::mem::take(&mut self.pending[idx]);
                self.append(now, stream, false, &text)?;
            }
        }
        self.flush_out()?;
        self.file.sync_all()
    }

    fn emit_line(
        &mut self,
        stream: OutputStream,
        line: &[u8],
        partial: bool,
        now: u128,
    ) -> io::Result<()> {
        let mut chunks = line.chunks(MAX_RECORD_TEXT).peekable();
        if chunks.peek().is_none() {
            return self.append(now, stream, partial, b"");
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            self.append(now, stream, partial || !last, c)?;
        }
        Ok(())
    }

    // Encodes one record into the pending output, rotating first when the
    // file (with what is pending) would pass its limit.
    fn append(
        &mut self,
        now: u128,
        stream: OutputStream,
        partial: bool,
        text: &[u8],
    ) -> io::Result<()> {
        if self.ts.0 != now {
            self.ts = (now, rfc3339_nanos(now));
        }
        let before = self.out.len();
        encode_into(&mut self.out, &self.ts.1, stream, partial, text);
        let len = (self.out.len() - before) as u64;
        let used = self.size + before as u64;
        if used > 0 && used + len > self.limits.max_bytes {
            let record = self.out.split_off(before);
            self.flush_out()?;
            self.rotate()?;
            self.out = record;
        }
        Ok(())
    }

    fn flush_out(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            let r = self.file.write_all(&self.out);
            // Written or not, these bytes are settled: a failing disk drops
            // output instead of growing memory.
            self.size += self.out.len() as u64;
            self.out.clear();
            r?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let keep = self.limits.max_files;
        if keep <= 1 {
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        // output.log.{n-1} -> .{n}, ..., output.log -> .1; the oldest is
        // replaced by the rename onto it.
        for n in (1..keep - 1).rev() {
            match fs::rename(log_path(&self.dir, n), log_path(&self.dir, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        fs::rename(log_path(&self.dir, 0), log_path(&self.dir, 1))?;
        self.file = open_append(&log_path(&self.dir, 0))?;
        self.size = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::decode;

    fn records(path: &Path) -> Vec<(OutputStream, bool, String)> {
        let data = fs::read(path).unwrap_or_default();
        data.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let r = decode(l).unwrap();
                (r.stream, r.partial, r.text)
            })
            .collect()
    }

    #[test]
    fn lines_split_partials_and_streams() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        log.write(OutputStream::Stdout, b"one\ntw", 1).unwrap();
        log.write(OutputStream::Stderr, b"err\n", 2).unwrap();
        log.write(OutputStream::Stdout, b"o\nthree", 3).unwrap();
        assert!(log.has_pending());
        log.flush_partial(4).unwrap();
        log.write(OutputStream::Stdout, b" more\n\n", 5).unwrap();
        log.finish(6).unwrap();
        use OutputStream::*;
        assert_eq!(
            records(&log_path(dir.path(), 0)),
            [
                (Stdout, false, "one".into()),
                (Stderr, false, "err".into()),
                (Stdout, false, "two".into()),
                (Stdout, true, "three".into()),
                (Stdout, false, " more".into()),
                (Stdout, false, "".into()),
            ]
        );
    }

    #[test]
    fn rotates_by_size_and_keeps_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let limits = LogLimits {
            max_bytes: 1024,
            max_files: 3,
        };
        let mut log = RotatingLog::open(dir.path(), limits).unwrap();
        for i in 0..200 {
            log.write(OutputStream::Stdout, format!("line {i:04}\n").as_bytes(), 1)
                .unwrap();
        }
        log.finish(2).unwrap();
        for n in 0..3 {
            let len = fs::metadata(log_path(dir.path(), n)).unwrap().len();
            assert!(len <= 1024, "file {n} is {len} bytes");
        }
        assert!(!log_path(dir.path(), 3).exists());
        // The newest lines are in output.log, the ones before in .1, .2,
        // contiguous.
        let mut all = Vec::new();
        for n in (0..3).rev() {
            all.extend(records(&log_path(dir.path(), n)).into_iter().map(|r| r.2));
        }
        assert_eq!(all.last().unwrap(), "line 0199");
        let first: usize = all[0][5..].parse().unwrap();
        let expect: Vec<String> = (first..200).map(|i| format!("line {i:04}")).collect();
        assert_eq!(all, expect);
        assert!(first > 0, "old lines were rotated out");
    }

    #[test]
    fn long_lines_are_cut_into_partials() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        let long = vec![b'x'; MAX_RECORD_TEXT * 2 + 10];
        log.write(OutputStream::Stdout, &long, 1).unwrap();
        log.write(OutputStream::Stdout, b"\n", 1).unwrap();
        log.finish(1).unwrap();
        let recs = records(&log_path(dir.path(), 0));
        let partials: Vec<bool> = recs.iter().map(|r| r.1).collect();
        assert_eq!(partials, [true, true, false]);
        let total: usize = recs.iter().map(|r| r.2.len()).sum();
        assert_eq!(total, long.len());
    }
}
