//! Binding the API's unix socket: directory created, a stale socket replaced, a
//! live one refused, mode 0660 and optionally a group, removed on drop.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Permissions of the socket: owner and group may connect.
pub const SOCKET_MODE: u32 = 0o660;

/// Errors binding the socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another process answers on the socket.
    #[error("{0} is in use by another running darosd (connect succeeded); stop it or use --socket")]
    InUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// Path involved.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The configured group does not exist.
    #[error("api.socket_group: group {0:?} not found in /etc/group")]
    NoSuchGroup(String),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Removes the socket file when dropped (clean shutdown).
#[derive(Debug)]
pub struct SocketGuard {
    path: PathBuf,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Looks up a group id in an `/etc/group`-format text.
pub fn gid_of(group_file: &str, name: &str) -> Option<u32> {
    group_file.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        let _pw = f.next()?;
        f.next()?.parse().ok()
    })
}

/// Binds `path` for the API.
pub fn bind(
    path: &Path,
    group: Option<&str>,
) -> Result<(tokio::net::UnixListener, SocketGuard), SocketError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("chmod", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io_err("removing stale socket", path))?;
        }
        Ok(_) => return Err(SocketError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspecting", path)(e)),
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(io_err("binding", path))?;
    let guard = SocketGuard {
        path: path.to_path_buf(),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_err("chmod", path))?;
    if let Some(g) = group {
        let groups = std::fs::read_to_string("/etc/group")
            .map_err(io_err("reading", Path::new("/etc/group")))?;
        let gid = gid_of(&groups, g).ok_or_else(|| SocketError::NoSuchGroup(g.to_string()))?;
        rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(gid)))
            .map_err(|e| io_err("chown", path)(e.into()))?;
    }
    Ok((listener, guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lookup() {
        let f = "root:x:0:\ndaros:x:990:alice,bob\n";
        assert_eq!(gid_of(f, "daros"), Some(990));
        assert_eq!(gid_of(f, "dar"), None);
    }

    #[tokio::test]
    async fn stale_replaced_live_refused_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/agent.sock");
        let (l, g) = bind(&p, None).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(matches!(bind(&p, None), Err(SocketError::InUse(_))));
        // Simulate a crash: listener gone, file left behind.
        drop(l);
        std::mem::forget(g);
        assert!(p.exists());
        let (_l2, g2) = bind(&p, None).unwrap();
        drop(g2);
        assert!(!p.exists());
        let f = dir.path().join("plain");
        std::fs::write(&f, "x").unwrap();
        assert!(matches!(bind(&f, None), Err(SocketError::NotASocket(_))));
        assert!(matches!(
            bind(&dir.path().join("s2"), Some("no-such-group-daros")),
            Err(SocketError::NoSuchGroup(_))
        ));
    }
}
