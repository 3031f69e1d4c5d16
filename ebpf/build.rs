//! Compiles every `src/bpf/*.bpf.c` into `$OUT_DIR/<name>.bpf.o` with clang (`-target bpf -O2 -g`,
//! CO-RE through the hand-written `vmlinux_min.h`; the crate embeds the objects with
//! `aya::include_bytes_aligned!`), and writes `$OUT_DIR/c_layout.rs`: the layouts clang gives the
//! shared `cg_*` structs, against which `src/abi.rs` checks its Rust mirrors.

use std::{
    env,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

fn fail(msg: impl std::fmt::Display) -> ! {
    panic!("\n\ndaros-ebpf build: {msg}\n\n")
}

fn env_path(name: &str) -> PathBuf {
    env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| fail(format!("{name} not set")))
}

fn main() {
    let src = env_path("CARGO_MANIFEST_DIR").join("src/bpf");
    let out = env_path("OUT_DIR");
    let clang = env::var("DAROS_CLANG").unwrap_or_else(|_| "clang".to_owned());
    println!("cargo:rerun-if-env-changed=DAROS_CLANG");
    println!("cargo:rerun-if-changed={}", src.display());

    check_toolchain(&clang);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| fail(format!("cannot read {}: {e}", src.display())))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in &entries {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for path in entries
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
    {
        compile(&clang, &src, path, &out);
    }
    dump_layouts(&clang, &src, &out);
}

fn check_toolchain(clang: &str) {
    match Command::new(clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => fail(format!(
            "`{clang}` not found. The eBPF programs are C compiled with clang: install it \
             (Debian: apt-get install -y --no-install-recommends clang llvm libbpf-dev) \
             or point DAROS_CLANG at a clang binary."
        )),
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        fail("/usr/include/bpf/bpf_helpers.h not found: install libbpf-dev");
    }
}

fn base_args(include: &Path) -> Vec<String> {
    vec![
        "-target".into(),
        "bpf".into(),
        format!("-I/usr/include/{}-linux-gnu", target_arch()),
        format!("-I{}", include.display()),
    ]
}

fn run(clang: &str, args: &[String], what: &Path) -> String {
    let output = Command::new(clang)
        .args(args)
        .output()
        .unwrap_or_else(|e| fail(format!("running {clang}: {e}")));
    if !output.status.success() {
        fail(format!(
            "clang failed on {}:\n{}",
            what.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn compile(clang: &str, include: &Path, source: &Path, out: &Path) {
    let file = source
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_else(|| fail("non-UTF-8 file"));
    let object = out.join(file.replace(".bpf.c", ".bpf.o"));
    let mut args = base_args(include);
    args.extend(["-O2", "-g", "-Wall", "-Werror", "-c"].map(String::from));
    args.push(source.display().to_string());
    args.push("-o".into());
    args.push(object.display().to_string());
    run(clang, &args, source);
}

/// Parses clang's `-fdump-record-layouts` output: `OFFSET | struct NAME`, then top-level fields
/// indented by exactly three spaces (`OFFSET |   TYPE NAME`), closed by `| [sizeof=N, ...]`.
fn dump_layouts(clang: &str, include: &Path, out: &Path) {
    let source = include.join("abi_layout.c");
    let mut args = base_args(include);
    args.extend(["-fsyntax-only", "-Xclang", "-fdump-record-layouts"].map(String::from));
    args.push(source.display().to_string());
    let text = run(clang, &args, &source);

    let mut rust = String::from("&[\n");
    let mut current: Option<(String, Vec<(String, usize)>)> = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once('|') else {
            continue;
        };
        let offset = left.trim().parse::<usize>().ok();
        if let Some(name) = right.strip_prefix(" struct ") {
            if offset == Some(0) && current.is_none() {
                current = Some((name.trim().to_owned(), Vec::new()));
            }
        } else if let Some(rest) = right.trim().strip_prefix("[sizeof=") {
            if let Some((name, fields)) = current.take() {
                let size: usize = rest
                    .split(',')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail(format!("bad layout line {line:?}")));
                let _ = write!(rust, "    ({name:?}, {size}, &[");
                for (field, off) in fields {
                    let _ = write!(rust, "({field:?}, {off}), ");
                }
                rust.push_str("]),\n");
            }
        } else if let (Some(off), Some((_, fields))) = (offset, current.as_mut())
            && right.starts_with("   ")
            && !right.starts_with("    ")
        {
            let field = right.split_whitespace().last().unwrap_or_default();
            fields.push((field.to_owned(), off));
        }
    }
    rust.push_str("]\n");
    std::fs::write(out.join("c_layout.rs"), rust)
        .unwrap_or_else(|e| fail(format!("writing c_layout.rs: {e}")));
}

fn target_arch() -> String {
    match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64".to_owned(),
        Ok(other) if !other.is_empty() => other.to_owned(),
        _ => "x86_64".to_owned(),
    }
}
