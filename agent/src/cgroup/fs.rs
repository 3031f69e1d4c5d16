//! The one place where cgroup (and proc) files are read and written.
//!
//! Every error carries the path, and for writes the data, so an operator can
//! reproduce the failing operation by hand.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Errors from the cgroup layer.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A file could not be opened or read.
    #[error("reading {path}: {source}")]
    Read {
        /// File that failed.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// A value could not be written to a file.
    #[error("writing {data:?} to {path}: {source}")]
    Write {
        /// File that failed.
        path: PathBuf,
        /// Data that was being written.
        data: String,
        /// Underlying error.
        source: io::Error,
    },
    /// A directory could not be created or removed.
    #[error("{op} {path}: {source}")]
    Dir {
        /// `creating` or `removing`.
        op: &'static str,
        /// Directory that failed.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The cgroup disappeared (removed while being sampled).
    #[error("cgroup file {path} is gone (cgroup removed)")]
    Gone {
        /// File that vanished.
        path: PathBuf,
    },
    /// A file's content did not have the expected format.
    #[error("parsing {path}: {reason}")]
    Parse {
        /// File with unexpected content.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A cgroup name was refused.
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName {
        /// The refused name.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The host has no usable cgroup hierarchy for this operation.
    #[error("{0}")]
    Unsupported(String),
}

impl CgroupError {
    /// True when the error means the cgroup no longer exists.
    pub fn is_gone(&self) -> bool {
        matches!(self, CgroupError::Gone { .. })
    }
}

fn is_gone_io(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

fn read_error(path: &Path, source: io::Error) -> CgroupError {
    if is_gone_io(&source) {
        CgroupError::Gone {
            path: path.to_path_buf(),
        }
    } else {
        CgroupError::Read {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A cgroup or proc file kept open and re-read from offset 0 on every sample.
///
/// Keeping the descriptor avoids a path lookup per read (the dominant cost of
/// sampling many cgroups); kernfs and seq_file regenerate the content when a
/// read starts at offset 0.
#[derive(Debug)]
pub struct StatFile {
    path: PathBuf,
    file: Option<File>,
}

impl StatFile {
    /// Opens `path` for repeated reads.
    pub fn open(path: PathBuf) -> Result<Self, CgroupError> {
        let file = File::open(&path).map_err(|e| read_error(&path, e))?;
        Ok(StatFile {
            path,
            file: Some(file),
        })
    }

    /// Opens `path` if it exists; `Ok(None)` when it does not.
    pub fn open_optional(path: PathBuf) -> Result<Option<Self>, CgroupError> {
        match Self::open(path) {
            Ok(f) => Ok(Some(f)),
            Err(CgroupError::Gone { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A handle that opens the file on every read instead of keeping it open
    /// (used when the descriptor budget is exhausted).
    pub fn reopening(path: PathBuf) -> Self {
        StatFile { path, file: None }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the whole file into `buf` (cleared first).
    pub fn read_into(&mut self, buf: &mut Vec<u8>) -> Result<(), CgroupError> {
        buf.clear();
        match &self.file {
            Some(f) => read_all_at(f, buf).map_err(|e| read_error(&self.path, e)),
            None => {
                let f = File::open(&self.path).map_err(|e| read_error(&self.path, e))?;
                read_all_at(&f, buf).map_err(|e| read_error(&self.path, e))
            }
        }
    }

    /// Reads the file from offset 0 into `out` with one `pread`, without
    /// allocating (for small files re-read on a hot path: pressure, cpu.stat,
    /// memory.current). `Ok(None)` when the content may not fit in `out`.
    pub fn read_small<'a>(&mut self, out: &'a mut [u8]) -> Result<Option<&'a [u8]>, CgroupError> {
        let n = match &self.file {
            Some(f) => f.read_at(out, 0),
            None => File::open(&self.path).and_then(|f| f.read_at(out, 0)),
        }
        .map_err(|e| read_error(&self.path, e))?;
        Ok((n < out.len()).then(|| &out[..n]))
    }

    /// Reads the file and parses it as a single unsigned integer (`max` → `u64::MAX`).
    pub fn read_u64(&mut self, buf: &mut Vec<u8>) -> Result<u64, CgroupError> {
        self.read_into(buf)?;
        crate::cgroup::parse::single_u64(buf).ok_or_else(|| CgroupError::Parse {
            path: self.path.clone(),
            reason: format!(
                "expected one integer, got {:?}",
                String::from_utf8_lossy(&buf[..buf.len().min(64)])
            ),
        })
    }
}

/// Whether sampled files keep their descriptor between reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Keep the file open and re-read it (fast; one descriptor per file).
    KeepOpen,
    /// Open the file on every read (used when descriptors run short).
    Reopen,
}

impl OpenMode {
    /// Opens `path` in this mode; `Ok(None)` if it does not exist.
    pub fn open_optional(self, path: PathBuf) -> Result<Option<StatFile>, CgroupError> {
        match self {
            OpenMode::KeepOpen => StatFile::open_optional(path),
            OpenMode::Reopen => Ok(path.exists().then(|| StatFile::reopening(path))),
        }
    }

    /// Opens `path` in this mode; a missing file is an error.
    pub fn open(self, path: PathBuf) -> Result<StatFile, CgroupError> {
        match self.open_optional(path.clone())? {
            Some(f) => Ok(f),
            None => Err(CgroupError::Gone { path }),
        }
    }
}

fn read_all_at(f: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    let mut off = 0u64;
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity());
        }
        let len = buf.len();
        let spare = buf.capacity() - len;
        buf.resize(len + spare, 0);
        let n = match f.read_at(&mut buf[len..], off) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                buf.truncate(len);
                continue;
            }
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        };
        buf.truncate(len + n);
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

/// Reads a whole file into `buf` once (open, read, close).
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), CgroupError> {
    StatFile::reopening(path.to_path_buf()).read_into(buf)
}

/// Reads a whole file as a string.
pub fn read_string(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|e| read_error(path, e))
}

/// Writes `data` to an existing cgroup file in one `write(2)`, as the kernel expects.
pub fn write(path: &Path, data: &str) -> Result<(), CgroupError> {
    let wrap = |source| CgroupError::Write {
        path: path.to_path_buf(),
        data: data.to_string(),
        source,
    };
    let mut f = OpenOptions::new().write(true).open(path).map_err(wrap)?;
    f.write_all(data.as_bytes()).map_err(wrap)
}

/// Creates a cgroup directory (and missing parents); an existing one is fine.
pub fn create_dir(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir_all(path).map_err(|source| CgroupError::Dir {
        op: "creating",
        path: path.to_path_buf(),
        source,
    })
}

/// Removes an empty cgroup directory; a missing one is fine.
pub fn remove_dir(path: &Path) -> Result<(), CgroupError> {
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CgroupError::Dir {
            op: "removing",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_file_rereads_from_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "123\n").unwrap();
        let mut f = StatFile::open(p.clone()).unwrap();
        let mut buf = Vec::new();
        assert_eq!(f.read_u64(&mut buf).unwrap(), 123);
        std::fs::write(&p, "4567\n").unwrap();
        assert_eq!(f.read_u64(&mut buf).unwrap(), 4567);
    }

    #[test]
    fn small_reads_without_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cpu.pressure");
        std::fs::write(&p, "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n").unwrap();
        let mut f = StatFile::open(p.clone()).unwrap();
        let mut out = [0u8; 256];
        let got = f.read_small(&mut out).unwrap().unwrap();
        assert!(got.ends_with(b"total=42\n"));
        let mut tiny = [0u8; 8];
        assert!(f.read_small(&mut tiny).unwrap().is_none(), "does not fit");
        assert!(
            StatFile::reopening(p)
                .read_small(&mut out)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn large_file_read_completely() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        let content = "x".repeat(100_000);
        std::fs::write(&p, &content).unwrap();
        let mut buf = Vec::new();
        read_into(&p, &mut buf).unwrap();
        assert_eq!(buf.len(), 100_000);
    }

    #[test]
    fn missing_file_is_gone_and_errors_name_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope");
        let err = StatFile::open(p.clone()).unwrap_err();
        assert!(err.is_gone());
        assert!(err.to_string().contains("nope"));
        assert!(StatFile::open_optional(p.clone()).unwrap().is_none());
        let werr = write(&p, "42").unwrap_err();
        let msg = werr.to_string();
        assert!(msg.contains("\"42\"") && msg.contains("nope"), "{msg}");
    }

    #[test]
    fn parse_error_names_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("memory.current");
        std::fs::write(&p, "abc\n").unwrap();
        let mut buf = Vec::new();
        let err = StatFile::open(p).unwrap().read_u64(&mut buf).unwrap_err();
        assert!(err.to_string().contains("memory.current"), "{err}");
    }
}
