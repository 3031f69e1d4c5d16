//! Name rules for objects (DNS-1123 labels, as Kubernetes uses) and the
//! composite key of an application.

use crate::field::FieldError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Checks that `name` is a DNS-1123 label: 1-63 characters of `a-z`, `0-9`
/// and `-`, starting and ending with a letter or digit.
pub fn check_name(path: &str, name: &str) -> Option<FieldError> {
    let reason = if name.is_empty() {
        "must not be empty".to_string()
    } else if name.len() > 63 {
        format!("{name:?} is longer than 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        format!("{name:?} may only contain a-z, 0-9 and '-'")
    } else if name.starts_with('-') || name.ends_with('-') {
        format!("{name:?} must start and end with a letter or digit")
    } else {
        return None;
    };
    Some(FieldError::new(path, reason))
}

/// An application is named within its tenant: `tenant/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AppKey {
    /// Owning tenant.
    pub tenant: String,
    /// Application name.
    pub name: String,
}

impl AppKey {
    /// Key of application `name` of `tenant`.
    pub fn new(tenant: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            name: name.into(),
        }
    }

    /// Reads `tenant/name`.
    pub fn parse(s: &str) -> Option<Self> {
        let (t, n) = s.split_once('/')?;
        (!t.is_empty() && !n.is_empty() && !n.contains('/')).then(|| Self::new(t, n))
    }
}

impl fmt::Display for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("n", "web-1").is_none());
        assert!(check_name("n", "Web").is_some());
        assert!(check_name("n", "-a").is_some());
        assert!(check_name("n", "").is_some());
        assert_eq!(
            AppKey::parse("acme/shop"),
            Some(AppKey::new("acme", "shop"))
        );
        assert_eq!(AppKey::parse("shop"), None);
    }
}
