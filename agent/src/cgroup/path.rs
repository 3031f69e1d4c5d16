//! Cgroup paths relative to a hierarchy's mount point.

use std::path::{Path, PathBuf};

use super::fs::CgroupError;

/// A validated cgroup path relative to the hierarchy root, e.g. `daros/web`
/// (empty for the root itself). Never contains `..`, `.` or empty components.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CgroupPath(String);

impl CgroupPath {
    /// The hierarchy root.
    pub fn root() -> Self {
        CgroupPath(String::new())
    }

    /// Validates a relative path; leading and trailing `/` are ignored.
    pub fn new(path: &str) -> Result<Self, CgroupError> {
        let trimmed = path.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self::root());
        }
        for comp in trimmed.split('/') {
            validate_component(comp).map_err(|reason| CgroupError::InvalidName {
                name: path.to_string(),
                reason,
            })?;
        }
        Ok(CgroupPath(trimmed.to_string()))
    }

    /// Appends one validated component.
    pub fn join(&self, name: &str) -> Result<Self, CgroupError> {
        validate_component(name).map_err(|reason| CgroupError::InvalidName {
            name: name.to_string(),
            reason,
        })?;
        if self.0.is_empty() {
            Ok(CgroupPath(name.to_string()))
        } else {
            Ok(CgroupPath(format!("{}/{}", self.0, name)))
        }
    }

    /// The relative path (`""` for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last component (`""` for the root).
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The path under a hierarchy mount point.
    pub fn under(&self, mount: &Path) -> PathBuf {
        if self.0.is_empty() {
            mount.to_path_buf()
        } else {
            mount.join(&self.0)
        }
    }

    /// True if `self` equals `other` or lies below it.
    pub fn starts_with(&self, other: &CgroupPath) -> bool {
        other.0.is_empty()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// Every ancestor from the top down, ending with `self` (the root excluded).
    pub fn prefixes(&self) -> impl Iterator<Item = &str> {
        let s = self.0.as_str();
        s.match_indices('/')
            .map(move |(i, _)| &s[..i])
            .chain((!s.is_empty()).then_some(s))
    }
}

impl std::fmt::Display for CgroupPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}", self.0)
    }
}

fn validate_component(c: &str) -> Result<(), &'static str> {
    if c.is_empty() {
        return Err("empty path component");
    }
    if c == "." || c == ".." {
        return Err("`.` and `..` are not allowed");
    }
    if c.len() > 255 {
        return Err("component longer than 255 bytes");
    }
    if c.contains('/') {
        return Err("a name must not contain `/`");
    }
    if c.bytes()
        .any(|b| b == 0 || b == b'\n' || b.is_ascii_control())
    {
        return Err("control characters are not allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid() {
        assert_eq!(
            CgroupPath::new("/daros/web/").unwrap().as_str(),
            "daros/web"
        );
        assert_eq!(CgroupPath::new("").unwrap(), CgroupPath::root());
        assert!(CgroupPath::new("a/../b").is_err());
        assert!(CgroupPath::new("a//b").is_err());
        assert!(CgroupPath::root().join("x/y").is_err());
        assert!(CgroupPath::root().join("..").is_err());
        assert!(CgroupPath::root().join("ok\n").is_err());
    }

    #[test]
    fn relations() {
        let a = CgroupPath::new("daros").unwrap();
        let b = a.join("web").unwrap();
        assert!(b.starts_with(&a));
        assert!(!CgroupPath::new("daros2").unwrap().starts_with(&a));
        assert!(b.starts_with(&CgroupPath::root()));
        assert_eq!(b.name(), "web");
        assert_eq!(b.prefixes().collect::<Vec<_>>(), vec!["daros", "daros/web"]);
        assert_eq!(
            b.under(Path::new("/sys/fs/cgroup/memory")),
            PathBuf::from("/sys/fs/cgroup/memory/daros/web")
        );
        assert_eq!(b.to_string(), "/daros/web");
    }
}
