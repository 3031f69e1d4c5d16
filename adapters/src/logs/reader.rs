//! The reading side of instance logs: the last N lines across rotated
//! files, and a follower that keeps reading as lines are written and files
//! rotate (it polls its open file every 100 ms and switches to the new
//! `output.log` when the inode changes, after draining the old one).

use super::writer::log_path;
use super::{LogLine, decode};
use futures::Stream;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a follower looks for new lines.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

// Enough for any rotation setting the shim accepts.
const MAX_ROTATED: u32 = 1000;

/// The last `tail` lines (all when `None`) of the log in `dir`, oldest
/// first, with partial records joined to the rest of their line. A missing
/// log reads as empty.
pub fn read_tail(dir: &Path, tail: Option<usize>) -> io::Result<Vec<LogLine>> {
    // Read a margin of records beyond `tail`: pieces of partial lines join
    // into fewer lines.
    let records = tail.map(|t| t.saturating_mul(4).saturating_add(64));
    let lines = join_partials(LogFollower::start(dir, records)?.0);
    let skip = tail.map_or(0, |t| lines.len().saturating_sub(t));
    Ok(lines.into_iter().skip(skip).collect())
}

/// Joins each partial record to the records of the same stream that
/// continue it (up to the one that ends the line), keeping the time of the
/// first piece.
pub fn join_partials(records: Vec<LogLine>) -> Vec<LogLine> {
    let mut out: Vec<LogLine> = Vec::with_capacity(records.len());
    // Index in `out` of an unfinished line, per stream.
    let mut open: [Option<usize>; 2] = [None, None];
    for r in records {
        let s = r.stream as usize;
        if let Some(i) = open[s] {
            out[i].text.push_str(&r.text);
            out[i].partial = r.partial;
            if !r.partial {
                open[s] = None;
            }
            continue;
        }
        if r.partial {
            open[s] = Some(out.len());
        }
        out.push(r);
    }
    out
}

/// Reads new log lines as they are written.
#[derive(Debug)]
pub struct LogFollower {
    dir: PathBuf,
    file: Option<File>,
    // The newest file the follower is positioned in: the open one, or where
    // `output.log` was missing at the start (mid-rotation), `.1`.
    ino: Option<u64>,
    carry: Vec<u8>,
}

impl LogFollower {
    /// The last `tail` lines (all when `None`) and a follower positioned
    /// right after them.
    pub fn start(dir: &Path, tail: Option<usize>) -> io::Result<(Vec<LogLine>, Self)> {
        let mut me = Self {
            dir: dir.to_path_buf(),
            file: None,
            ino: None,
            carry: Vec::new(),
        };
        // Open the current file first: rotated files read after it are
        // older, and one that is this very file (rotated meanwhile) is
        // skipped.
        me.open_current()?;
        let current = me.read_available()?;
        let mut lines: VecDeque<LogLine> = current.into();
        let want = tail.unwrap_or(usize::MAX);
        let mut n = 1;
        while lines.len() < want && n < MAX_ROTATED {
            let p = log_path(dir, n);
            let data = match fs::read(&p) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            if me.ino.is_some() && fs::metadata(&p).map(|m| m.ino()).ok() == me.ino {
                n += 1;
                continue;
            }
            let older: Vec<LogLine> = records(&data).collect();
            for l in older.into_iter().rev() {
                lines.push_front(l);
            }
            n += 1;
        }
        if me.file.is_none() {
            // Started between a rotation's rename and the new file: the
            // newest content is `.1`'s, and the follower is after it.
            me.ino = fs::metadata(log_path(dir, 1)).ok().map(|m| m.ino());
        }
        let skip = lines.len().saturating_sub(want);
        Ok((lines.into_iter().skip(skip).collect(), me))
    }

    /// Lines written since the last call (possibly none); never blocks.
    pub fn poll_once(&mut self) -> io::Result<Vec<LogLine>> {
        let now_ino = match fs::metadata(log_path(&self.dir, 0)) {
            Ok(m) => Some(m.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut out = self.read_available()?;
        if now_ino.is_none() || now_ino == self.ino {
            return Ok(out);
        }
        // Rotated (or created): the old file was drained just above. A poll
        // that came late may find more than one rotation since: the files
        // rotated after the old one are read whole before the new current
        // one. The old file stays open until then, so its inode cannot be
        // reused by a new file meanwhile.
        let Some((file, ino)) = open_ino(&log_path(&self.dir, 0))? else {
            return Ok(out); // mid-rotation: the next poll switches
        };
        match self.read_rotated_between(self.ino, ino) {
            Ok(between) => out.extend(between),
            // What was drained is not lost: the switch is tried again at the
            // next poll, which reports the error if it persists.
            Err(_) if !out.is_empty() => return Ok(out),
            Err(e) => return Err(e),
        }
        self.carry.clear();
        self.file = Some(file);
        self.ino = Some(ino);
        out.extend(self.read_available()?);
        Ok(out)
    }

    /// The rotated files newer than the one with inode `held` (all of them
    /// when `None`: the log did not exist when following began) and older
    /// than `current`, oldest first. Rotation only moves names up, so
    /// scanning up meets every file at least once; a file met twice (renamed
    /// during the scan) is read once, and files met before `current` (it was
    /// rotated during the scan) are newer than it: later polls read them.
    fn read_rotated_between(&self, held: Option<u64>, current: u64) -> io::Result<Vec<LogLine>> {
        let mut newer: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut missing = 0;
        for n in 1..MAX_ROTATED {
            let Some((mut f, ino)) = open_ino(&log_path(&self.dir, n))? else {
                // A name is briefly missing while a rotation renames; two
                // missing in a row are the end.
                missing += 1;
                if missing == 2 {
                    break;
                }
                continue;
            };
            missing = 0;
            if Some(ino) == held {
                break;
            }
            if ino == current {
                newer.clear();
                continue;
            }
            if newer.iter().any(|(i, _)| *i == ino) {
                continue;
            }
            let mut data = Vec::new();
            f.read_to_end(&mut data)?;
            newer.push((ino, data));
        }
        Ok(newer.iter().rev().flat_map(|(_, d)| records(d)).collect())
    }

    /// Waits for and returns the next lines.
    pub async fn next_lines(&mut self) -> io::Result<Vec<LogLine>> {
        loop {
            let lines = self.poll_once()?;
            if !lines.is_empty() {
                return Ok(lines);
            }
            tokio::time::sleep(FOLLOW_INTERVAL).await;
        }
    }

    /// The follower as a stream of lines.
    pub fn into_stream(self) -> impl Stream<Item = io::Result<LogLine>> + Send + 'static {
        futures::stream::unfold(
            (self, VecDeque::<LogLine>::new()),
            |(mut f, mut buf)| async move {
                loop {
                    if let Some(l) = buf.pop_front() {
                        return Some((Ok(l), (f, buf)));
                    }
                    match f.next_lines().await {
                        Ok(lines) => buf.extend(lines),
                        Err(e) => return Some((Err(e), (f, buf))),
                    }
                }
            },
        )
    }

    fn open_current(&mut self) -> io::Result<()> {
        let opened = open_ino(&log_path(&self.dir, 0))?;
        self.ino = opened.as_ref().map(|(_, ino)| *ino);
        self.file = opened.map(|(f, _)| f);
        Ok(())
    }

    fn read_available(&mut self) -> io::Result<Vec<LogLine>> {
        let Some(f) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        let mut data = std::mem::take(&mut self.carry);
        f.read_to_end(&mut data)?;
        let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.carry = data.split_off(complete);
        Ok(records(&data).collect())
    }
}

/// The records in `data` (whole lines; lines that are not records skipped).
fn records(data: &[u8]) -> impl Iterator<Item = LogLine> + '_ {
    data.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(decode)
}

/// `path` opened with its inode; `None` when it does not exist.
fn open_ino(path: &Path) -> io::Result<Option<(File, u64)>> {
    match File::open(path) {
        Ok(f) => {
            let ino = f.metadata()?.ino();
            Ok(Some((f, ino)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::{LogLimits, OutputStream, RotatingLog};

    /// A log rotated at the smallest size the writer allows.
    fn small_log(dir: &Path, max_files: u32) -> RotatingLog {
        let limits = LogLimits {
            max_bytes: 1024,
            max_files,
        };
        RotatingLog::open(dir, limits).unwrap()
    }

    fn texts(lines: &[LogLine]) -> Vec<String> {
        lines.iter().map(|l| l.text.clone()).collect()
    }

    #[test]
    fn tail_spans_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = small_log(dir.path(), 4);
        for i in 0..60 {
            log.write(OutputStream::Stdout, format!("l{i}\n").as_bytes(), 1)
                .unwrap();
        }
        assert!(log_path(dir.path(), 1).exists(), "rotated at least once");
        let last = read_tail(dir.path(), Some(25)).unwrap();
        let want: Vec<String> = (35..60).map(|i| format!("l{i}")).collect();
        assert_eq!(texts(&last), want);
        assert_eq!(read_tail(dir.path(), None).unwrap().len(), 60);
        assert!(
            read_tail(&dir.path().join("none"), Some(5))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn follower_sees_new_lines_across_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = small_log(dir.path(), 3);
        log.write(OutputStream::Stdout, b"before\n", 1).unwrap();
        let (tail, mut f) = LogFollower::start(dir.path(), Some(10)).unwrap();
        assert_eq!(texts(&tail), ["before"]);
        assert!(f.poll_once().unwrap().is_empty());
        let mut seen = Vec::new();
        for i in 0..100 {
            log.write(OutputStream::Stderr, format!("n{i}\n").as_bytes(), 2)
                .unwrap();
            if i % 7 == 0 {
                seen.extend(texts(&f.poll_once().unwrap()));
            }
        }
        seen.extend(texts(&f.poll_once().unwrap()));
        let want: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        assert_eq!(seen, want, "every line once, in order, across rotations");
    }

    #[test]
    fn a_late_poll_reads_every_file_rotated_since_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = small_log(dir.path(), 4);
        let (_, mut f) = LogFollower::start(dir.path(), Some(10)).unwrap();
        let mut seen = Vec::new();
        let mut i = 0;
        // Three rounds, each rotating twice or three times before the
        // follower polls: the file it held is at `.2` or `.3` by then.
        for rotations in [2, 3, 2] {
            let start = fs::metadata(log_path(dir.path(), 0)).unwrap().ino();
            let mut inos = vec![start];
            while inos.len() <= rotations {
                log.write(OutputStream::Stdout, format!("n{i}\n").as_bytes(), 1)
                    .unwrap();
                i += 1;
                let ino = fs::metadata(log_path(dir.path(), 0)).unwrap().ino();
                if !inos.contains(&ino) {
                    inos.push(ino);
                }
            }
            seen.extend(texts(&f.poll_once().unwrap()));
        }
        let want: Vec<String> = (0..i).map(|i| format!("n{i}")).collect();
        assert_eq!(seen, want, "every line once, in order");
    }

    #[test]
    fn a_follower_started_mid_rotation_does_not_repeat_the_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        log.write(OutputStream::Stdout, b"old\n", 1).unwrap();
        drop(log);
        // A rotation caught between its rename and the new file.
        fs::rename(log_path(dir.path(), 0), log_path(dir.path(), 1)).unwrap();
        let (tail, mut f) = LogFollower::start(dir.path(), Some(10)).unwrap();
        assert_eq!(texts(&tail), ["old"]);
        assert!(f.poll_once().unwrap().is_empty());
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        log.write(OutputStream::Stdout, b"new\n", 2).unwrap();
        assert_eq!(texts(&f.poll_once().unwrap()), ["new"]);
    }

    #[test]
    fn partial_records_join_their_line_per_stream() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        log.write(OutputStream::Stdout, b"Password: ", 1).unwrap();
        log.flush_partial(2).unwrap();
        log.write(OutputStream::Stderr, b"warning\n", 3).unwrap();
        log.write(OutputStream::Stdout, b"ok\nnext\n", 4).unwrap();
        let all = read_tail(dir.path(), None).unwrap();
        let got: Vec<(OutputStream, String, bool)> = all
            .iter()
            .map(|l| (l.stream, l.text.clone(), l.partial))
            .collect();
        assert_eq!(
            got,
            [
                (OutputStream::Stdout, "Password: ok".into(), false),
                (OutputStream::Stderr, "warning".into(), false),
                (OutputStream::Stdout, "next".into(), false),
            ]
        );
        assert_eq!(all[0].time, 2, "the time of the first piece");
        assert_eq!(texts(&read_tail(dir.path(), Some(1)).unwrap()), ["next"]);
    }

    #[test]
    fn follower_waits_for_a_log_that_does_not_exist_yet() {
        let dir = tempfile::tempdir().unwrap();
        let (tail, mut f) = LogFollower::start(dir.path(), Some(10)).unwrap();
        assert!(tail.is_empty());
        assert!(f.poll_once().unwrap().is_empty());
        let mut log = RotatingLog::open(dir.path(), LogLimits::default()).unwrap();
        log.write(OutputStream::Stdout, b"first\n", 1).unwrap();
        assert_eq!(texts(&f.poll_once().unwrap()), ["first"]);
    }
}
