//! The guest kernel: the Debian package that `linux-image-amd64` depends on, fetched with
//! `apt-get download` (never installed), unpacked with `dpkg-deb -x`, reduced to an ELF
//! `vmlinux` plus the few modules the guest needs, and cached with the initramfs.
//!
//! Cache layout (`<root>` from [`KernelCache::from_env`]):
//! `<root>/lock` (serialises preparation), `<root>/current` (name of the prepared
//! package), `<root>/<package>/{kernel.json,vmlinux,config,modules/*.ko,initramfs.cpio}`,
//! and `<root>/.scratch-*` while a package is downloaded and unpacked.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::{Deserialize, Serialize};

use super::bzimage::{self, BzImageError};
use super::host::{self, HostError};
use super::initramfs::{self, InitramfsError};
use super::modules::{self, BOOT_MODULES, DISK_MODULES, Module, ModulesError};

/// The Debian meta package whose dependency is the current kernel.
pub const META_PACKAGE: &str = "linux-image-amd64";
/// Environment variable overriding the cache directory.
pub const ENV_CACHE: &str = "DAROS_VM_CACHE";
/// Environment variable naming a kernel `.deb` to use instead of downloading one.
pub const ENV_KERNEL_DEB: &str = "DAROS_VM_KERNEL_DEB";

const MANIFEST: &str = "kernel.json";
/// Bumped when the cache layout changes; older caches are fetched again.
const MANIFEST_FORMAT: u32 = 2;
const CURRENT: &str = "current";

/// Why the kernel could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A file operation in the cache failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A host tool is missing.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A host command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// apt does not know which kernel `linux-image-amd64` stands for.
    #[error(
        "`apt-cache depends {META_PACKAGE}` names no kernel package (apt sources without Debian main?): {0}"
    )]
    NoKernelPackage(String),
    /// The unpacked package has no kernel image.
    #[error("{0}: the kernel package has no boot/vmlinuz-*")]
    NoVmlinuz(PathBuf),
    /// The kernel image could not be turned into a bootable vmlinux.
    #[error(transparent)]
    BzImage(#[from] BzImageError),
    /// The guest modules could not be resolved.
    #[error(transparent)]
    Modules(#[from] ModulesError),
    /// The initramfs could not be built.
    #[error(transparent)]
    Initramfs(#[from] InitramfsError),
    /// A cache manifest is unreadable.
    #[error("{path}: broken cache manifest ({reason}); delete the directory to re-fetch")]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KernelError + '_ {
    move |source| KernelError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Which kernel to prepare.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KernelSource {
    /// The cached current kernel; resolve and fetch `linux-image-amd64`'s dependency if none.
    #[default]
    Current,
    /// `apt-get update`, then resolve and fetch `linux-image-amd64`'s dependency again.
    Refresh,
    /// A named kernel package (e.g. `linux-image-6.1.0-56-amd64`).
    Package(String),
    /// A kernel `.deb` already on disk (offline use).
    Deb(PathBuf),
}

impl KernelSource {
    /// [`KernelSource::Deb`] when `DAROS_VM_KERNEL_DEB` is set, else [`KernelSource::Current`].
    pub fn from_env() -> Self {
        std::env::var_os(ENV_KERNEL_DEB).map_or(Self::Current, |p| Self::Deb(PathBuf::from(p)))
    }
}

/// A prepared guest kernel in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedKernel {
    /// Cache layout version ([`MANIFEST_FORMAT`] when written by this code).
    #[serde(default)]
    pub format: u32,
    /// Debian package name (`linux-image-6.1.0-56-amd64`).
    pub package: String,
    /// Debian package version (`6.1.192-2`).
    pub version: String,
    /// Kernel release (`uname -r` in the guest).
    pub release: String,
    /// Boot modules in the initramfs, in load order.
    pub modules: Vec<String>,
    /// ext4 modules for the IO test disk, in load order (loaded in parallel).
    #[serde(default)]
    pub disk_modules: Vec<String>,
    /// The module lists asked for when it was prepared; a cache prepared for other
    /// lists lacks modules and is prepared again.
    #[serde(default)]
    pub requested: Vec<String>,
    /// The cache directory of this kernel.
    #[serde(skip)]
    pub dir: PathBuf,
}

impl PreparedKernel {
    /// The ELF kernel QEMU boots.
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    /// The initramfs QEMU loads.
    pub fn initramfs(&self) -> PathBuf {
        self.dir.join("initramfs.cpio")
    }
    /// The kernel's build configuration.
    pub fn config(&self) -> PathBuf {
        self.dir.join("config")
    }
}

const SCRATCH_PREFIX: &str = ".scratch-";

/// A scratch directory in the cache, removed when dropped (also on errors).
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kernel cache directory.
#[derive(Debug, Clone)]
pub struct KernelCache {
    root: PathBuf,
}

fn run(cmd: &mut Command) -> Result<Output, KernelError> {
    let command = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| KernelError::Command {
        command: command.clone(),
        status: "not started".into(),
        stderr: e.to_string(),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(KernelError::Command {
            command,
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(out)
}

/// The kernel package `apt-cache depends linux-image-amd64` names, if any.
pub fn parse_depends(output: &str) -> Option<String> {
    output
        .lines()
        .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-") && *p != META_PACKAGE)
        .map(str::to_owned)
}

fn resolve_package(update_first: bool) -> Result<String, KernelError> {
    let tools = host::require(&[host::APT_CACHE, host::APT_GET])?;
    if update_first {
        run(Command::new(&tools[1]).arg("update"))?;
    }
    let ask = || -> Result<Option<String>, KernelError> {
        let out = Command::new(&tools[0])
            .args(["depends", META_PACKAGE])
            .output();
        let out = out.map_err(|e| KernelError::NoKernelPackage(e.to_string()))?;
        Ok(parse_depends(&String::from_utf8_lossy(&out.stdout)))
    };
    if let Some(p) = ask()? {
        return Ok(p);
    }
    if !update_first {
        // A fresh machine has no package index yet.
        tracing::info!("apt has no index for {META_PACKAGE}: running apt-get update");
        run(Command::new(&tools[1]).arg("update"))?;
        if let Some(p) = ask()? {
            return Ok(p);
        }
    }
    let out = run(Command::new(&tools[0]).args(["depends", META_PACKAGE]));
    Err(KernelError::NoKernelPackage(match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => e.to_string(),
    }))
}

/// The module lists of this build, as recorded in the manifest.
fn requested_modules() -> Vec<String> {
    BOOT_MODULES
        .iter()
        .chain(DISK_MODULES)
        .map(|m| (*m).to_owned())
        .collect()
}

fn deb_field(dpkg_deb: &Path, deb: &Path, field: &str) -> Result<String, KernelError> {
    let out = run(Command::new(dpkg_deb).arg("-f").arg(deb).arg(field))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl KernelCache {
    /// The cache at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The cache at `$DAROS_VM_CACHE`, else `$XDG_CACHE_HOME/daros-vm`, else
    /// `$HOME/.cache/daros-vm`, else `/var/cache/daros-vm`.
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = var(ENV_CACHE)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("daros-vm")))
            .or_else(|| var("HOME").map(|d| d.join(".cache/daros-vm")))
            .unwrap_or_else(|| PathBuf::from("/var/cache/daros-vm"));
        Self::at(root)
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes sure the kernel named by `source` is unpacked, converted and cached and its
    /// initramfs is current; returns it. Holds `<root>/lock` while it works so concurrent
    /// runs wait instead of racing.
    pub fn prepare(&self, source: &KernelSource) -> Result<PreparedKernel, KernelError> {
        std::fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let lock_path = self.root.join("lock");
        let lock = File::create(&lock_path).map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        self.sweep_scratch();

        let kernel = match source {
            KernelSource::Current => match self.current()? {
                Some(k) => k,
                None => self.fetch_package(&resolve_package(false)?)?,
            },
            KernelSource::Refresh => self.fetch_package(&resolve_package(true)?)?,
            KernelSource::Package(name) => self.fetch_package(name)?,
            KernelSource::Deb(deb) => {
                let dpkg_deb = host::require(&[host::DPKG_DEB])?.remove(0);
                let package = deb_field(&dpkg_deb, deb, "Package")?;
                match self.load(&package)? {
                    Some(k) if k.version == deb_field(&dpkg_deb, deb, "Version")? => k,
                    _ => self.unpack(&package, deb)?,
                }
            }
        };
        self.refresh_initramfs(&kernel)?;
        let current = self.root.join(CURRENT);
        std::fs::write(&current, &kernel.package).map_err(io(&current))?;
        Ok(kernel)
    }

    fn current(&self) -> Result<Option<PreparedKernel>, KernelError> {
        let path = self.root.join(CURRENT);
        match std::fs::read_to_string(&path) {
            Ok(name) => self.load(name.trim()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    fn load(&self, package: &str) -> Result<Option<PreparedKernel>, KernelError> {
        let dir = self.root.join(package);
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let mut k: PreparedKernel =
            serde_json::from_str(&text).map_err(|e| KernelError::BadManifest {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if k.format != MANIFEST_FORMAT {
            tracing::info!(
                package,
                format = k.format,
                "cached kernel has an old layout: preparing it again"
            );
            return Ok(None);
        }
        if k.requested != requested_modules() {
            tracing::info!(
                package,
                "cached kernel was prepared for other guest modules: preparing it again"
            );
            return Ok(None);
        }
        k.dir = dir;
        if !k.vmlinux().is_file() {
            return Err(KernelError::BadManifest {
                path,
                reason: "vmlinux is missing".into(),
            });
        }
        Ok(Some(k))
    }

    fn fetch_package(&self, package: &str) -> Result<PreparedKernel, KernelError> {
        if let Some(k) = self.load(package)? {
            return Ok(k);
        }
        let apt_get = host::require(&[host::APT_GET])?.remove(0);
        let staging = self.fresh_dir("download")?;
        let staging = staging.path();
        tracing::info!(package, "downloading the guest kernel package");
        let download = |dir: &Path| {
            run(Command::new(&apt_get)
                .arg("download")
                .arg(package)
                .current_dir(dir))
        };
        if download(staging).is_err() {
            // The index may name a version the mirror no longer has.
            run(Command::new(&apt_get).arg("update"))?;
            download(staging)?;
        }
        let deb = std::fs::read_dir(staging)
            .map_err(io(staging))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .ok_or_else(|| KernelError::NoVmlinuz(staging.to_owned()))?;
        self.unpack(package, &deb)
    }

    fn fresh_dir(&self, prefix: &str) -> Result<Scratch, KernelError> {
        let dir = self
            .root
            .join(format!("{SCRATCH_PREFIX}{prefix}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(Scratch(dir))
    }

    /// Removes scratch directories of preparations that were killed. Only called with the
    /// lock held, so no live preparation owns one.
    fn sweep_scratch(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    fn unpack(&self, package: &str, deb: &Path) -> Result<PreparedKernel, KernelError> {
        host::require(&[host::XZ])?;
        let dpkg_deb = host::require(&[host::DPKG_DEB])?.remove(0);
        let version = deb_field(&dpkg_deb, deb, "Version")?;
        let staging = self.fresh_dir("unpack")?;
        self.unpack_into(package, &version, deb, &dpkg_deb, staging.path())
    }

    fn unpack_into(
        &self,
        package: &str,
        version: &str,
        deb: &Path,
        dpkg_deb: &Path,
        staging: &Path,
    ) -> Result<PreparedKernel, KernelError> {
        let tree = staging.join("tree");
        tracing::info!(deb = %deb.display(), "unpacking the guest kernel package");
        run(Command::new(dpkg_deb).arg("-x").arg(deb).arg(&tree))?;
        let boot = tree.join("boot");
        let vmlinuz = std::fs::read_dir(&boot)
            .map_err(|_| KernelError::NoVmlinuz(deb.to_owned()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("vmlinuz-"))
            })
            .ok_or_else(|| KernelError::NoVmlinuz(deb.to_owned()))?;
        let release = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .unwrap_or_default()
            .to_owned();

        let out = staging.join("out");
        std::fs::create_dir_all(out.join("modules")).map_err(io(&out))?;
        bzimage::extract_vmlinux(&vmlinuz, &out.join("vmlinux"))?;
        let config = boot.join(format!("config-{release}"));
        std::fs::copy(&config, out.join("config")).map_err(io(&config))?;
        let mod_dir = tree.join("lib/modules").join(&release);
        let boot = modules::resolve(&mod_dir, BOOT_MODULES, &[])?;
        let disk = modules::resolve(&mod_dir, DISK_MODULES, &boot)?;
        for m in boot.iter().chain(&disk) {
            let dst = out.join("modules").join(format!("{}.ko", m.name));
            std::fs::copy(&m.path, &dst).map_err(io(&m.path))?;
        }
        let names = |v: Vec<Module>| v.into_iter().map(|m| m.name).collect();
        let kernel = PreparedKernel {
            format: MANIFEST_FORMAT,
            package: package.to_owned(),
            version: version.to_owned(),
            release,
            modules: names(boot),
            disk_modules: names(disk),
            requested: requested_modules(),
            dir: self.root.join(package),
        };
        let manifest = out.join(MANIFEST);
        let json = serde_json::to_string_pretty(&kernel).map_err(|e| KernelError::BadManifest {
            path: manifest.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&manifest, json).map_err(io(&manifest))?;
        if kernel.dir.exists() {
            std::fs::remove_dir_all(&kernel.dir).map_err(io(&kernel.dir))?;
        }
        std::fs::rename(&out, &kernel.dir).map_err(io(&kernel.dir))?;
        tracing::info!(package, release = %kernel.release, "guest kernel cached");
        Ok(kernel)
    }

    fn refresh_initramfs(&self, kernel: &PreparedKernel) -> Result<(), KernelError> {
        let busybox = host::static_busybox()?;
        let group = |names: &[String]| -> Vec<Module> {
            names
                .iter()
                .map(|name| Module {
                    name: name.clone(),
                    path: kernel.dir.join("modules").join(format!("{name}.ko")),
                })
                .collect()
        };
        let image = initramfs::build(
            &busybox,
            &group(&kernel.modules),
            &group(&kernel.disk_modules),
        )?;
        let path = kernel.initramfs();
        if std::fs::read(&path).ok().as_deref() == Some(image.as_slice()) {
            return Ok(());
        }
        // Write then rename: a VM starting right now keeps reading the old file.
        let tmp = kernel
            .dir
            .join(format!(".initramfs-{}", std::process::id()));
        std::fs::write(&tmp, &image).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_cache_depends_output_names_the_kernel() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            parse_depends(out).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        let alt = "linux-image-amd64\n |Depends: linux-image-6.1.0-57-amd64\n  Depends: foo\n";
        assert_eq!(
            parse_depends(alt).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(parse_depends("E: No packages found\n"), None);
    }

    #[test]
    fn cache_root_follows_the_environment_order() {
        // Only reads the variables; other tests do not set them.
        let c = KernelCache::at("/x");
        assert_eq!(c.root(), Path::new("/x"));
        let from_env = KernelCache::from_env();
        assert!(from_env.root().ends_with("daros-vm") || std::env::var_os(ENV_CACHE).is_some());
    }

    #[test]
    fn scratch_dirs_go_away_on_drop_and_on_the_next_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        let s = cache.fresh_dir("download").unwrap();
        let p = s.path().to_owned();
        std::fs::write(p.join("x.deb"), "x").unwrap();
        drop(s);
        assert!(!p.exists());
        // A killed preparation leaves one behind; the next one (holding the lock) sweeps it.
        let stale = dir.path().join(".scratch-unpack-1");
        std::fs::create_dir_all(stale.join("tree")).unwrap();
        std::fs::create_dir(dir.path().join("linux-image-keep")).unwrap();
        cache.sweep_scratch();
        assert!(!stale.exists());
        assert!(dir.path().join("linux-image-keep").exists());
    }

    #[test]
    fn a_broken_manifest_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        std::fs::create_dir(dir.path().join("linux-image-x")).unwrap();
        std::fs::write(dir.path().join("linux-image-x/kernel.json"), "{").unwrap();
        let err = cache.load("linux-image-x").unwrap_err().to_string();
        assert!(
            err.contains("kernel.json") && err.contains("delete the directory"),
            "{err}"
        );
    }
}
