//! A writer for the `newc` cpio format the kernel unpacks as an initramfs.
//!
//! Written here rather than by the `cpio` tool so the archive is built in memory, is
//! byte-for-byte reproducible (fixed inode numbers and mtimes) and needs no staging tree.

/// An in-memory `newc` archive.
#[derive(Debug, Default)]
pub struct CpioWriter {
    buf: Vec<u8>,
    next_ino: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl CpioWriter {
    /// An empty archive.
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            next_ino: 1,
        }
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        let size = data.len() as u32;
        let namesize = name.len() as u32 + 1;
        let fields = [
            ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, namesize, 0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// Adds a directory (`name` without a leading `/`).
    pub fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, 2, (0, 0), &[]);
    }

    /// Adds a regular file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, S_IFREG | (perm & 0o7777), 1, (0, 0), data);
    }

    /// Adds a symbolic link pointing at `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes());
    }

    /// Adds a character device node (e.g. `dev/console`, 5:1).
    pub fn char_device(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | (perm & 0o7777), 1, (major, minor), &[]);
    }

    /// Appends the trailer and returns the archive bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[]);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn entries_are_aligned_and_reproducible() {
        let build = || {
            let mut w = CpioWriter::new();
            w.dir("bin");
            w.file("bin/x", 0o755, b"abc");
            w.finish()
        };
        let a = build();
        assert_eq!(a, build());
        assert!(a.len().is_multiple_of(4));
        assert!(a.starts_with(b"070701"));
        assert!(a.windows(10).any(|w| w == b"TRAILER!!!"));
    }

    #[test]
    fn gnu_cpio_or_busybox_lists_and_extracts_it() {
        let mut w = CpioWriter::new();
        w.dir("etc");
        w.file("etc/hello", 0o644, b"hello\n");
        w.symlink("etc/link", "hello");
        let archive = w.finish();
        let dir = tempfile::tempdir().unwrap();
        // busybox-static is a prerequisite of the VM, so its cpio is always there.
        let mut child = Command::new("busybox")
            .args(["cpio", "-id"])
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &archive).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(
            std::fs::read(dir.path().join("etc/hello")).unwrap(),
            b"hello\n"
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("etc/link"))
                .unwrap()
                .to_str(),
            Some("hello")
        );
    }
}
