//! Durable, private file writes for key material.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::PkiError;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `data` atomically (temp file, fsync, rename, fsync dir) with `mode`.
pub(crate) fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), PkiError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io(&tmp))?;
        // mode() only applies on creation; a stale temp file keeps its old mode.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io(&tmp))?;
        f.write_all(data).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Reads a UTF-8 file.
pub(crate) fn read_file(path: &Path) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(io(path))
}

/// Refuses a private file readable by group or others.
pub(crate) fn check_private(path: &Path) -> Result<(), PkiError> {
    let meta = fs::metadata(path).map_err(io(path))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(PkiError::BadFile {
            path: path.to_path_buf(),
            reason: format!("holds a secret but has mode {mode:o}; expected 600"),
        });
    }
    Ok(())
}
