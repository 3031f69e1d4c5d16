//! The guest's initramfs: static busybox, the kernel modules in load order and `/init`
//! (`guest-init.sh`), packed uncompressed (TCG would spend longer unpacking gzip than
//! the kernel spends reading 3 MB).

use std::path::{Path, PathBuf};

use super::cpio::CpioWriter;
use super::modules::Module;

/// The guest init script: mounts, cgroup2 set-up, job start, power-off.
pub const INIT_SCRIPT: &str = include_str!("guest-init.sh");

/// Why the initramfs could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct InitramfsError {
    /// The file that could not be read.
    pub path: PathBuf,
    /// The underlying error.
    pub source: std::io::Error,
}

/// Builds the initramfs bytes from a static busybox and the two module groups (each in
/// load order): `/etc/daros-modules` (boot) and `/etc/daros-modules-disk` (loaded in parallel).
pub fn build(busybox: &Path, boot: &[Module], disk: &[Module]) -> Result<Vec<u8>, InitramfsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| InitramfsError {
            path: path.to_owned(),
            source,
        })
    };
    let mut w = CpioWriter::new();
    for dir in [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib/modules",
        "proc",
        "sys",
        "tmp",
    ] {
        w.dir(dir);
    }
    w.char_device("dev/console", 0o600, 5, 1);
    w.char_device("dev/null", 0o666, 1, 3);
    w.file("bin/busybox", 0o755, &read(busybox)?);
    w.symlink("bin/sh", "busybox");
    for (list, modules) in [
        ("etc/daros-modules", boot),
        ("etc/daros-modules-disk", disk),
    ] {
        let mut order = String::new();
        for m in modules {
            w.file(
                &format!("lib/modules/{}.ko", m.name),
                0o644,
                &read(&m.path)?,
            );
            order.push_str(&m.name);
            order.push('\n');
        }
        w.file(list, 0o644, order.as_bytes());
    }
    w.file("init", 0o755, INIT_SCRIPT.as_bytes());
    Ok(w.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn init_script_is_valid_busybox_sh() {
        let out = Command::new("busybox")
            .args(["sh", "-n", "-c", INIT_SCRIPT])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn archive_holds_init_busybox_and_modules_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ko = |n: &str| {
            let p = dir.path().join(format!("{n}.ko"));
            std::fs::write(&p, n).unwrap();
            Module {
                name: n.into(),
                path: p,
            }
        };
        let bb = crate::vm::host::static_busybox().unwrap();
        let img = build(&bb, &[ko("virtio"), ko("virtio_blk")], &[ko("ext4")]).unwrap();
        let out = dir.path().join("x");
        std::fs::create_dir(&out).unwrap();
        let mut child = Command::new("busybox")
            // Device nodes are left out: extracting them needs root.
            .args([
                "cpio",
                "-id",
                "init",
                "etc/daros-modules",
                "etc/daros-modules-disk",
                "bin/busybox",
            ])
            .current_dir(&out)
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &img).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(
            std::fs::read_to_string(out.join("etc/daros-modules")).unwrap(),
            "virtio\nvirtio_blk\n"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("init")).unwrap(),
            INIT_SCRIPT
        );
        assert_eq!(
            std::fs::read(out.join("bin/busybox")).unwrap(),
            std::fs::read(bb).unwrap()
        );
    }
}
