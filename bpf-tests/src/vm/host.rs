//! Host prerequisites: which tools the runner calls and which Debian package has each.
//!
//! Missing tools are reported all at once with the `apt-get install` line that fixes them.

use std::path::{Path, PathBuf};

use super::elf::Elf;

/// A host program the runner needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    /// Executable name looked up in `PATH` (plus `/usr/sbin`, `/sbin`).
    pub name: &'static str,
    /// Debian package that provides it.
    pub package: &'static str,
    /// What the runner uses it for.
    pub purpose: &'static str,
}

/// QEMU: runs the VM.
pub const QEMU: Tool = Tool {
    name: "qemu-system-x86_64",
    package: "qemu-system-x86",
    purpose: "runs the VM",
};
/// busybox (static): the guest's init and tools.
pub const BUSYBOX: Tool = Tool {
    name: "busybox",
    package: "busybox-static",
    purpose: "guest init and its tools",
};
/// mkfs.ext4: formats the IO test disk.
pub const MKFS_EXT4: Tool = Tool {
    name: "mkfs.ext4",
    package: "e2fsprogs",
    purpose: "formats the IO test disk",
};
/// xz: decompresses the Debian kernel image.
pub const XZ: Tool = Tool {
    name: "xz",
    package: "xz-utils",
    purpose: "decompresses the kernel image",
};
/// apt-get: downloads the kernel package.
pub const APT_GET: Tool = Tool {
    name: "apt-get",
    package: "apt",
    purpose: "downloads the kernel package",
};
/// apt-cache: names the current kernel package.
pub const APT_CACHE: Tool = Tool {
    name: "apt-cache",
    package: "apt",
    purpose: "names the current kernel package",
};
/// dpkg-deb: unpacks the kernel package.
pub const DPKG_DEB: Tool = Tool {
    name: "dpkg-deb",
    package: "dpkg",
    purpose: "unpacks the kernel package",
};

/// Tools needed to boot an already prepared kernel.
pub const RUN_TOOLS: &[Tool] = &[QEMU, MKFS_EXT4];
/// Tools needed to fetch and prepare a kernel.
pub const PREPARE_TOOLS: &[Tool] = &[BUSYBOX, XZ, APT_GET, APT_CACHE, DPKG_DEB];

/// Why the host cannot run the VM.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Some tools are not installed.
    #[error(
        "missing host tools: {}; install them with: apt-get install -y --no-install-recommends {}",
        .missing.iter().map(|t| format!("{} ({}, {})", t.name, t.package, t.purpose)).collect::<Vec<_>>().join(", "),
        packages(.missing)
    )]
    Missing {
        /// The tools that were not found.
        missing: Vec<Tool>,
    },
    /// busybox is there but dynamically linked: it cannot run as the initramfs's init.
    #[error(
        "{0} is dynamically linked; the guest init needs the static one: apt-get install -y busybox-static"
    )]
    BusyboxNotStatic(PathBuf),
    /// busybox could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn packages(tools: &[Tool]) -> String {
    let mut p: Vec<&str> = tools.iter().map(|t| t.package).collect();
    p.dedup();
    p.join(" ")
}

/// Finds `name` in `PATH`, then in `/usr/sbin` and `/sbin` (not in a normal user's PATH).
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolves every tool, or reports all missing ones with the install line.
pub fn require(tools: &[Tool]) -> Result<Vec<PathBuf>, HostError> {
    let found: Vec<Option<PathBuf>> = tools.iter().map(|t| find_in_path(t.name)).collect();
    let missing: Vec<Tool> = tools
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(t, _)| *t)
        .collect();
    if !missing.is_empty() {
        return Err(HostError::Missing { missing });
    }
    Ok(found.into_iter().flatten().collect())
}

/// The static busybox binary to put in the initramfs.
pub fn static_busybox() -> Result<PathBuf, HostError> {
    let path = require(&[BUSYBOX])?.remove(0);
    let bytes = std::fs::read(&path).map_err(|source| HostError::Io {
        path: path.clone(),
        source,
    })?;
    let dynamic = Elf::parse(&bytes)
        .map(|e| e.has_interpreter())
        .unwrap_or(Ok(true));
    match dynamic {
        Ok(false) => Ok(path),
        _ => Err(HostError::BusyboxNotStatic(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_are_all_named_with_their_package() {
        let fake = Tool {
            name: "daros-test-no-such-tool",
            package: "daros-test-pkg",
            purpose: "x",
        };
        let err = require(&[fake, QEMU, fake]).unwrap_err().to_string();
        assert!(
            err.contains("daros-test-no-such-tool (daros-test-pkg, x)"),
            "{err}"
        );
        assert!(
            err.contains("apt-get install -y --no-install-recommends daros-test-pkg"),
            "{err}"
        );
        assert!(
            !err.contains("qemu-system-x86_64"),
            "qemu is installed here: {err}"
        );
    }

    #[test]
    fn finds_sbin_tools_even_outside_path() {
        assert!(find_in_path("mkfs.ext4").is_some());
        assert!(find_in_path("sh").is_some());
    }
}
