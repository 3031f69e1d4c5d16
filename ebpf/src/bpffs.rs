//! The bpf filesystem: mounting it when the host has not, the pin directory of one datapath
//! (`/sys/fs/bpf/daros` in production, `/sys/fs/bpf/daros-test-*` in tests), its owner lock and
//! its removal, which detaches every pinned link and frees every pinned map.

use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// Where bpffs is expected.
pub const BPFFS_MOUNT: &str = "/sys/fs/bpf";
/// The production pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/daros";
/// `BPF_FS_MAGIC` from `<linux/magic.h>`.
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;

/// Whether `path` is on bpffs.
pub fn is_bpffs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|st| st.f_type as u64 == BPF_FS_MAGIC)
}

/// Mounts bpffs on [`BPFFS_MOUNT`] unless it is mounted already. Returns whether it mounted.
pub fn ensure_mounted() -> Result<bool> {
    let mount = Path::new(BPFFS_MOUNT);
    if is_bpffs(mount) {
        return Ok(false);
    }
    std::fs::create_dir_all(mount).map_err(|e| Error::io("creating", mount, e))?;
    rustix::mount::mount(
        "bpf",
        mount,
        "bpf",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| Error::io("mounting bpffs on", mount, e.into()))?;
    tracing::info!(path = BPFFS_MOUNT, "mounted bpffs");
    Ok(true)
}

/// The pin directory of one datapath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinDir {
    root: PathBuf,
}

impl PinDir {
    /// A pin directory at `root` (created on [`PinDir::create`]). Must be on bpffs.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The production pin directory, [`DEFAULT_PIN_DIR`].
    pub fn production() -> Self {
        Self::new(DEFAULT_PIN_DIR)
    }

    /// The root path.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// A sub-directory for one object (`net`, `sched`).
    pub fn sub(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Mounts bpffs if needed and creates the directory.
    pub fn create(&self) -> Result<()> {
        ensure_mounted()?;
        let parent = self.root.parent().unwrap_or(Path::new("/"));
        if !is_bpffs(parent) && !is_bpffs(&self.root) {
            return Err(Error::NotBpfFs(self.root.clone()));
        }
        std::fs::create_dir_all(&self.root).map_err(|e| Error::io("creating", &self.root, e))
    }

    /// Whether anything is pinned here.
    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }

    /// Removes every pin under the directory and the directory itself. Removing a link pin
    /// detaches its program; maps are freed once no program or process uses them. Returns the
    /// number of pins removed; a missing directory is not an error.
    pub fn remove_all(&self) -> Result<usize> {
        if !self.root.exists() {
            return Ok(0);
        }
        remove_tree(&self.root)
    }
}

/// Removes every pin below `dir` but keeps `dir` (and a lock held on it).
pub(crate) fn clear_contents(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("listing", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("listing", dir, e))?;
        let path = entry.path();
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            removed += remove_tree(&path)?;
        } else {
            std::fs::remove_file(&path).map_err(|e| Error::io("unpinning", &path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn remove_tree(dir: &Path) -> Result<usize> {
    let removed = clear_contents(dir)?;
    std::fs::remove_dir(dir).map_err(|e| Error::io("removing", dir, e))?;
    Ok(removed)
}

/// An exclusive `flock` on a pin directory, held by the process that owns the datapath so a
/// second owner fails clearly instead of racing; released by the kernel when the owner dies.
#[derive(Debug)]
pub struct OwnerLock {
    _file: File,
}

impl OwnerLock {
    /// Takes the lock on `dir`, waiting up to [`OwnerLock::WAIT`]: a previous owner may still
    /// be exiting, and a child another thread forks holds a copy of the lock until it execs.
    pub fn acquire(dir: &Path) -> Result<Self> {
        let deadline = std::time::Instant::now() + Self::WAIT;
        let file = File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Self { _file: file }),
                Err(e) if io::Error::from(e).kind() == io::ErrorKind::WouldBlock => {
                    if std::time::Instant::now() >= deadline {
                        return Err(Error::Busy(dir.to_owned()));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(Error::io("locking", dir, e.into())),
            }
        }
    }

    /// How long [`OwnerLock::acquire`] waits for a lock that is held.
    pub const WAIT: std::time::Duration = std::time::Duration::from_secs(2);
}
