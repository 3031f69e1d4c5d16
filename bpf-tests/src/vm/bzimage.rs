//! Turning a compressed x86 `vmlinuz` (bzImage) into the ELF `vmlinux` inside it.
//!
//! QEMU boots an ELF `vmlinux` directly through its PVH entry note, which skips the
//! kernel's own self-decompression (about 3 s under TCG). The payload is located with
//! the boot protocol's `payload_offset`/`payload_length` header fields (protocol 2.08+)
//! and decompressed by the host tool for its format (`xz`, `gzip`, `zstd`, ...): those
//! tools are already on every machine that can run the VM, and they handle the kernel's
//! BCJ-filtered xz streams, which a small pure-Rust decoder would not.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::elf::{EM_X86_64, Elf, ElfError};

/// Why a vmlinux could not be extracted.
#[derive(Debug, thiserror::Error)]
pub enum BzImageError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a bzImage this code understands.
    #[error("{path}: not a usable bzImage: {reason}")]
    NotBzImage {
        /// The file involved.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The payload's compression is not one of the known kernel formats.
    #[error("{path}: unknown kernel payload compression (first bytes {magic:02x?})")]
    UnknownCompression {
        /// The file involved.
        path: PathBuf,
        /// The first bytes of the payload.
        magic: Vec<u8>,
    },
    /// The decompressor could not be run or failed.
    #[error(
        "decompressing {path} with `{tool}` failed: {reason} (install the Debian package `{package}`)"
    )]
    Decompress {
        /// The file involved.
        path: PathBuf,
        /// The tool that was run.
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The decompressed payload is not a bootable x86-64 ELF kernel.
    #[error("{path}: extracted payload is not a bootable x86-64 ELF kernel: {reason}")]
    BadVmlinux {
        /// The file involved.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// A kernel payload compression format, as the kernel build writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip (no size appended: gzip has its own trailer).
    Gzip,
    /// xz with the x86 BCJ filter.
    Xz,
    /// zstd.
    Zstd,
    /// bzip2.
    Bzip2,
    /// legacy lzma.
    Lzma,
    /// lzo (lzop format).
    Lzo,
    /// lz4 legacy frame.
    Lz4,
}

impl Compression {
    /// Detects the format from the first bytes of the payload.
    pub fn detect(payload: &[u8]) -> Option<Self> {
        const MAGICS: &[(&[u8], Compression)] = &[
            (&[0x1f, 0x8b], Compression::Gzip),
            (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], Compression::Xz),
            (&[0x28, 0xb5, 0x2f, 0xfd], Compression::Zstd),
            (b"BZh", Compression::Bzip2),
            (&[0x5d, 0x00, 0x00], Compression::Lzma),
            (&[0x89, b'L', b'Z', b'O'], Compression::Lzo),
            (&[0x02, 0x21, 0x4c, 0x18], Compression::Lz4),
        ];
        MAGICS
            .iter()
            .find(|(magic, _)| payload.starts_with(magic))
            .map(|(_, c)| *c)
    }

    /// The host command that decompresses this format from stdin to stdout, and its package.
    fn tool(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Self::Gzip => ("gzip", &["-dc"], "gzip"),
            Self::Xz => ("xz", &["-dc", "--single-stream"], "xz-utils"),
            Self::Zstd => ("zstd", &["-dcq"], "zstd"),
            Self::Bzip2 => ("bzip2", &["-dc"], "bzip2"),
            Self::Lzma => ("xz", &["-dc", "--format=lzma"], "xz-utils"),
            Self::Lzo => ("lzop", &["-dc"], "lzop"),
            Self::Lz4 => ("lz4", &["-dc"], "lz4"),
        }
    }

    /// Whether the kernel build appended the 4-byte decompressed size to the stream.
    fn has_size_suffix(self) -> bool {
        self != Self::Gzip
    }
}

/// The compressed payload of a bzImage: where it is and how it is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload<'a> {
    /// The compressed bytes, without any appended size.
    pub data: &'a [u8],
    /// Its format.
    pub compression: Compression,
    /// The decompressed size the kernel build recorded, when it recorded one.
    pub expected_len: Option<u32>,
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Locates the compressed payload in the bytes of a bzImage.
pub fn payload<'a>(path: &Path, image: &'a [u8]) -> Result<Payload<'a>, BzImageError> {
    let bad = |reason: &str| BzImageError::NotBzImage {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if image.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return Err(bad("no \"HdrS\" boot header signature at 0x202"));
    }
    let version = image
        .get(0x206..0x208)
        .map(|v| u16::from_le_bytes([v[0], v[1]]))
        .ok_or_else(|| bad("truncated header"))?;
    if version < 0x208 {
        return Err(bad(&format!(
            "boot protocol {version:#x} has no payload fields (need 2.08+)"
        )));
    }
    let setup_sects = match image.get(0x1f1).copied() {
        Some(0) => 4,
        Some(n) => usize::from(n),
        None => return Err(bad("truncated header")),
    };
    let off = le32(image, 0x248).ok_or_else(|| bad("truncated header"))? as usize;
    let len = le32(image, 0x24c).ok_or_else(|| bad("truncated header"))? as usize;
    let start = (setup_sects + 1) * 512 + off;
    let data = start
        .checked_add(len)
        .and_then(|end| image.get(start..end))
        .ok_or_else(|| bad("payload_offset/payload_length point outside the file"))?;
    let compression =
        Compression::detect(data).ok_or_else(|| BzImageError::UnknownCompression {
            path: path.to_owned(),
            magic: data.iter().take(8).copied().collect(),
        })?;
    if compression.has_size_suffix() && data.len() >= 4 {
        let (stream, size) = data.split_at(data.len() - 4);
        return Ok(Payload {
            data: stream,
            compression,
            expected_len: le32(size, 0),
        });
    }
    Ok(Payload {
        data,
        compression,
        expected_len: None,
    })
}

/// Extracts the ELF `vmlinux` from the bzImage at `vmlinuz` into `out` and checks that
/// QEMU can boot it (x86-64 ELF with the Xen PVH entry note).
pub fn extract_vmlinux(vmlinuz: &Path, out: &Path) -> Result<(), BzImageError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| BzImageError::Io { path, source }
    };
    let image = std::fs::read(vmlinuz).map_err(io(vmlinuz))?;
    let payload = payload(vmlinuz, &image)?;
    let (tool, args, package) = payload.compression.tool();
    let fail = |reason: String| BzImageError::Decompress {
        path: vmlinuz.to_owned(),
        tool,
        package,
        reason,
    };
    let out_file = File::create(out).map_err(io(out))?;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(out_file)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| fail("no stdin pipe".into()))?;
    // Feed stdin from a thread so a full stderr pipe cannot deadlock us.
    let compressed = payload.data.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&compressed));
    let result = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    let fed = feeder
        .join()
        .map_err(|_| fail("stdin writer panicked".into()))?;
    if !result.status.success() {
        return Err(fail(format!(
            "{}: {}",
            result.status,
            String::from_utf8_lossy(&result.stderr).trim()
        )));
    }
    fed.map_err(|e| fail(format!("writing the payload: {e}")))?;
    let vmlinux = std::fs::read(out).map_err(io(out))?;
    check_vmlinux(out, &vmlinux, payload.expected_len)
}

/// Xen ELF note type of the 32-bit PVH entry point that QEMU's `-kernel` uses.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

fn check_vmlinux(
    path: &Path,
    vmlinux: &[u8],
    expected_len: Option<u32>,
) -> Result<(), BzImageError> {
    let bad = |reason: String| BzImageError::BadVmlinux {
        path: path.to_owned(),
        reason,
    };
    if let Some(expected) = expected_len
        && vmlinux.len() as u64 != u64::from(expected)
    {
        return Err(bad(format!(
            "{} bytes, but the kernel build recorded {expected}",
            vmlinux.len()
        )));
    }
    let elf = Elf::parse(vmlinux).map_err(|e: ElfError| bad(e.to_string()))?;
    if elf.machine() != EM_X86_64 {
        return Err(bad(format!("ELF machine {} is not x86-64", elf.machine())));
    }
    let notes = elf.notes().map_err(|e| bad(e.to_string()))?;
    if !notes
        .iter()
        .any(|n| n.name == b"Xen" && n.kind == XEN_ELFNOTE_PHYS32_ENTRY)
    {
        return Err(bad(
            "no Xen PVH entry note (kernel built without CONFIG_PVH)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bzimage(payload: &[u8], version: u16) -> Vec<u8> {
        let setup_sects = 1u8;
        let mut img = vec![0u8; (usize::from(setup_sects) + 1) * 512];
        img[0x1f1] = setup_sects;
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x206..0x208].copy_from_slice(&version.to_le_bytes());
        img[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        img.extend_from_slice(&[0u8; 16]);
        img.extend_from_slice(payload);
        img
    }

    #[test]
    fn locates_an_xz_payload_and_its_recorded_size() {
        let mut p = vec![0xfd, b'7', b'z', b'X', b'Z', 0x00, 1, 2, 3];
        p.extend_from_slice(&1234u32.to_le_bytes());
        let img = fake_bzimage(&p, 0x20f);
        let got = payload(Path::new("k"), &img).unwrap();
        assert_eq!(got.compression, Compression::Xz);
        assert_eq!(got.data, &p[..p.len() - 4]);
        assert_eq!(got.expected_len, Some(1234));
    }

    #[test]
    fn gzip_payload_keeps_its_tail() {
        let p = [0x1f, 0x8b, 8, 0, 9, 9, 9, 9];
        let img = fake_bzimage(&p, 0x20f);
        let got = payload(Path::new("k"), &img).unwrap();
        assert_eq!(
            (got.compression, got.data, got.expected_len),
            (Compression::Gzip, &p[..], None)
        );
    }

    #[test]
    fn rejects_old_protocol_garbage_and_out_of_range_payloads() {
        let img = fake_bzimage(&[0x1f, 0x8b], 0x206);
        assert!(matches!(
            payload(Path::new("k"), &img),
            Err(BzImageError::NotBzImage { .. })
        ));
        assert!(matches!(
            payload(Path::new("k"), b"MZ"),
            Err(BzImageError::NotBzImage { .. })
        ));
        let mut img = fake_bzimage(&[0x1f, 0x8b], 0x20f);
        img[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = payload(Path::new("k"), &img).unwrap_err();
        assert!(err.to_string().contains("outside the file"), "{err}");
        let img = fake_bzimage(b"????", 0x20f);
        assert!(matches!(
            payload(Path::new("k"), &img),
            Err(BzImageError::UnknownCompression { .. })
        ));
    }

    #[test]
    fn a_real_gzip_round_trip_that_is_not_a_kernel_is_rejected() {
        // Compress a non-kernel ELF (this test binary's first 64 KiB is not a full ELF,
        // so use a small shell payload) and check the ELF validation names the problem.
        let dir = tempfile::tempdir().unwrap();
        let raw = b"definitely not an elf file";
        let gz = Command::new("gzip")
            .arg("-c")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(raw)?;
                c.wait_with_output()
            })
            .unwrap();
        let img = fake_bzimage(&gz.stdout, 0x20f);
        let vmlinuz = dir.path().join("vmlinuz");
        std::fs::write(&vmlinuz, img).unwrap();
        let err = extract_vmlinux(&vmlinuz, &dir.path().join("vmlinux")).unwrap_err();
        assert!(matches!(err, BzImageError::BadVmlinux { .. }), "{err}");
        assert_eq!(std::fs::read(dir.path().join("vmlinux")).unwrap(), raw);
    }
}
