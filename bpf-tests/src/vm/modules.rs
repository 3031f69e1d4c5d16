//! Picking the guest kernel modules the VM needs out of an unpacked kernel package.
//!
//! A downloaded package has no `modules.dep`, so dependencies are read from each
//! module's own `.modinfo` section (`depends=`) and resolved into a load order.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::elf::Elf;

/// Modules the guest needs to boot, before their dependencies: PCI virtio transport,
/// the block device, the 9p host shares and the overlay root; then what the network
/// tests need: veth pairs between namespaces and the tbf qdisc that shapes them
/// (the eBPF floor tests' bottleneck).
pub const BOOT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "9pnet_virtio",
    "9p",
    "overlay",
    "veth",
    "sch_tbf",
];

/// Modules for ext4 on the IO test disk, loaded in parallel with the boot modules (ext4
/// alone takes ~0.35 s under TCG). `crc32c_generic` is ext4's and jbd2's soft dependency
/// (`softdep=pre: crypto-crc32c`): without modprobe in the guest nothing would load it.
pub const DISK_MODULES: &[&str] = &["crc32c_generic", "ext4"];

/// Why the module set could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    /// Reading the module tree failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A module file could not be parsed.
    #[error("{path}: cannot read module info: {reason}")]
    BadModule {
        /// The module file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A needed module is neither a `.ko` file nor built in.
    #[error(
        "kernel module `{name}` (needed by {needed_by}) is neither in {dir} nor listed in modules.builtin"
    )]
    Missing {
        /// The module name.
        name: String,
        /// Who needed it.
        needed_by: String,
        /// The module directory searched.
        dir: PathBuf,
    },
    /// The dependencies form a cycle.
    #[error("kernel module dependency cycle through `{0}`")]
    Cycle(String),
}

/// A module to put in the initramfs, in load order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Module name with `_` (the form `depends=` uses).
    pub name: String,
    /// Path of its `.ko` file.
    pub path: PathBuf,
}

/// Module name of a `.ko` file name: `crc32c-intel.ko` → `crc32c_intel`.
fn module_name(file_name: &str) -> Option<String> {
    file_name.strip_suffix(".ko").map(|n| n.replace('-', "_"))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModulesError + '_ {
    move |source| ModulesError::Io {
        path: path.to_owned(),
        source,
    }
}

fn index_ko_files(dir: &Path, into: &mut BTreeMap<String, PathBuf>) -> Result<(), ModulesError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        if entry.file_type().map_err(io(&path))?.is_dir() {
            index_ko_files(&path, into)?;
        } else if let Some(name) = entry.file_name().to_str().and_then(module_name) {
            into.insert(name, path);
        }
    }
    Ok(())
}

/// The `depends=` list from a module's `.modinfo` section.
pub fn module_depends(path: &Path) -> Result<Vec<String>, ModulesError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let bad = |reason: String| ModulesError::BadModule {
        path: path.to_owned(),
        reason,
    };
    let elf = Elf::parse(&bytes).map_err(|e| bad(e.to_string()))?;
    let modinfo = elf
        .section(".modinfo")
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("no .modinfo section".into()))?;
    Ok(modinfo
        .split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(b"depends="))
        .flat_map(|v| v.split(|&b| b == b','))
        .filter(|d| !d.is_empty())
        .map(|d| String::from_utf8_lossy(d).replace('-', "_"))
        .collect())
}

/// Resolves `wanted` and their dependencies under `modules_dir` (an unpacked
/// `lib/modules/<release>`) into load order. Built-in modules and those in `loaded`
/// (another group, loaded before) are skipped.
pub fn resolve(
    modules_dir: &Path,
    wanted: &[&str],
    loaded: &[Module],
) -> Result<Vec<Module>, ModulesError> {
    let mut files = BTreeMap::new();
    index_ko_files(&modules_dir.join("kernel"), &mut files)?;
    let builtin_path = modules_dir.join("modules.builtin");
    let builtin: HashSet<String> = std::fs::read_to_string(&builtin_path)
        .map_err(io(&builtin_path))?
        .lines()
        .filter_map(|l| l.rsplit('/').next().and_then(module_name))
        .collect();

    let mut order = Vec::new();
    let mut done: HashSet<String> = loaded.iter().map(|m| m.name.clone()).collect();
    for name in wanted {
        visit(
            name,
            "the VM",
            &files,
            &builtin,
            modules_dir,
            &mut done,
            &mut Vec::new(),
            &mut order,
        )?;
    }
    Ok(order)
}

#[allow(clippy::too_many_arguments)]
fn visit(
    name: &str,
    needed_by: &str,
    files: &BTreeMap<String, PathBuf>,
    builtin: &HashSet<String>,
    dir: &Path,
    done: &mut HashSet<String>,
    stack: &mut Vec<String>,
    order: &mut Vec<Module>,
) -> Result<(), ModulesError> {
    let name = name.replace('-', "_");
    if done.contains(&name) || builtin.contains(&name) {
        return Ok(());
    }
    if stack.contains(&name) {
        return Err(ModulesError::Cycle(name));
    }
    let Some(path) = files.get(&name) else {
        return Err(ModulesError::Missing {
            name,
            needed_by: needed_by.to_owned(),
            dir: dir.to_owned(),
        });
    };
    stack.push(name.clone());
    for dep in module_depends(path)? {
        visit(&dep, &name, files, builtin, dir, done, stack, order)?;
    }
    stack.pop();
    done.insert(name.clone());
    order.push(Module {
        name,
        path: path.clone(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_use_underscores() {
        assert_eq!(
            module_name("crc32c-intel.ko").as_deref(),
            Some("crc32c_intel")
        );
        assert_eq!(module_name("9p.ko").as_deref(), Some("9p"));
        assert_eq!(module_name("modules.order"), None);
    }

    #[test]
    fn missing_module_names_who_needed_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("kernel")).unwrap();
        std::fs::write(
            dir.path().join("modules.builtin"),
            "kernel/fs/ext4/ext4.ko\n",
        )
        .unwrap();
        // A built-in module is satisfied without a file ...
        assert_eq!(resolve(dir.path(), &["ext4"], &[]).unwrap(), vec![]);
        // ... a missing one is an error that says which and why.
        let err = resolve(dir.path(), &["9p"], &[]).unwrap_err().to_string();
        assert!(err.contains("`9p`") && err.contains("the VM"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_a_module_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernel/fs")).unwrap();
        std::fs::write(dir.path().join("kernel/fs/overlay.ko"), b"junk").unwrap();
        std::fs::write(dir.path().join("modules.builtin"), "").unwrap();
        let err = resolve(dir.path(), &["overlay"], &[]).unwrap_err();
        assert!(matches!(err, ModulesError::BadModule { .. }), "{err}");
        // ... unless another group already loads it.
        let loaded = [Module {
            name: "overlay".into(),
            path: "/x".into(),
        }];
        assert_eq!(resolve(dir.path(), &["overlay"], &loaded).unwrap(), vec![]);
    }
}
