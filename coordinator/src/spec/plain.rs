//! Deserialisation messages name Rust types ("invalid type: string \"x\",
//! expected u32", "expected struct WorkloadDoc"): a user writes YAML or
//! JSON, so those names are said in the user's terms instead.

/// `msg` with every "expected <Rust type>" said in the user's terms.
pub fn plain_types(msg: &str) -> String {
    const MARK: &str = "expected ";
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find(MARK) {
        out.push_str(&rest[..i + MARK.len()]);
        rest = &rest[i + MARK.len()..];
        let (said, used) = said(rest);
        out.push_str(&said);
        rest = &rest[used..];
    }
    out.push_str(rest);
    out
}

/// What the type name at the start of `s` means to a user, and how many
/// bytes of `s` it took (0 when `s` starts with no Rust type name).
fn said(s: &str) -> (String, usize) {
    let word_end = |from: usize| {
        s[from..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(s.len(), |n| from + n)
    };
    for (prefix, meaning) in [
        ("struct ", "a mapping of fields"),
        ("tuple struct ", "a value"),
        ("enum ", "one of the allowed values"),
        ("internally tagged enum ", "a mapping with its type field"),
    ] {
        if let Some(r) = s.strip_prefix(prefix)
            && r.starts_with(|c: char| c.is_ascii_uppercase())
        {
            return (meaning.to_string(), word_end(prefix.len()));
        }
    }
    let end = word_end(0);
    let meaning = match &s[..end] {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        "char" => "a single character",
        _ => return (String::new(), 0),
    };
    (meaning.to_string(), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_become_user_terms() {
        assert_eq!(
            plain_types("replicas: invalid type: string \"x\", expected u32"),
            "replicas: invalid type: string \"x\", expected a whole number from 0 to 4294967295"
        );
        assert_eq!(
            plain_types("invalid type: sequence, expected struct WorkloadDoc at line 3"),
            "invalid type: sequence, expected a mapping of fields at line 3"
        );
        assert_eq!(
            plain_types("expected f64, expected bool"),
            "expected a number, expected true or false"
        );
        // Words that are not Rust types are left as they were.
        assert_eq!(
            plain_types("expected a sequence; expected u32x; expected struct s"),
            "expected a sequence; expected u32x; expected struct s"
        );
    }
}
