//! Kernel fetch and cache: the real Debian package, unpacked and converted once, reused
//! afterwards, safe to prepare from several processes at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::process::Command;

use daros_bpf_tests::vm::elf::Elf;
use daros_bpf_tests::vm::modules::module_depends;
use daros_bpf_tests::vm::{KernelCache, KernelSource};

/// These tests fill the host's kernel cache (apt, network): the guest has neither.
fn host_only() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test prepares the host's kernel cache: run it on the host, not inside daros-vmtest"
    );
}
#[test]
fn prepared_kernel_is_bootable_elf_with_modules_in_dependency_order() {
    host_only();
    let k = KernelCache::from_env()
        .prepare(&KernelSource::from_env())
        .unwrap();
    let vmlinux = std::fs::read(k.vmlinux()).unwrap();
    let elf = Elf::parse(&vmlinux).unwrap();
    assert!(
        elf.notes()
            .unwrap()
            .iter()
            .any(|n| n.name == b"Xen" && n.kind == 18),
        "PVH entry note"
    );
    let config = std::fs::read_to_string(k.config()).unwrap();
    assert!(config.contains("CONFIG_PSI=y") && config.contains("CONFIG_DEBUG_INFO_BTF=y"));

    // Boot modules load in order; the disk group loads after (in parallel), on top of them.
    let mut loaded = HashSet::new();
    for m in k.modules.iter().chain(&k.disk_modules) {
        for dep in module_depends(&k.dir.join("modules").join(format!("{m}.ko"))).unwrap() {
            assert!(
                loaded.contains(&dep),
                "{m} needs {dep}, which is not loaded before it: {:?}",
                k.modules
            );
        }
        loaded.insert(m.clone());
    }
    for needed in [
        "virtio_pci",
        "virtio_blk",
        "9pnet_virtio",
        "9p",
        "overlay",
        "ext4",
        "crc32c_generic",
    ] {
        assert!(
            loaded.contains(needed),
            "{needed} missing from {:?}",
            k.modules
        );
    }
    assert!(std::fs::metadata(k.initramfs()).unwrap().len() > 1 << 20);
}

#[test]
fn concurrent_prepares_agree_and_the_cli_reports_the_cache() {
    host_only();
    let cli = || {
        Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
            .args(["prepare", "-o", "json"])
            .output()
            .unwrap()
    };
    let handles: Vec<_> = (0..3).map(|_| std::thread::spawn(cli)).collect();
    let reports: Vec<serde_json::Value> = handles
        .into_iter()
        .map(|h| {
            let out = h.join().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    for r in &reports {
        assert_eq!(r["package"], reports[0]["package"]);
        assert_eq!(r["initramfs"], reports[0]["initramfs"]);
        assert!(r["package"].as_str().unwrap().starts_with("linux-image-"));
    }
}
