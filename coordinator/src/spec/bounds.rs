//! Bounds checked on the raw text before any parsing. The YAML parser's cost
//! grows with the square of flow nesting (`[[[…`: 50,000 levels, a 100 KB
//! body, took 4.7 s of a core), so a spec deeper than any real one, or larger,
//! is refused by a linear scan first. JSON needs no scan: its parser refuses
//! depth beyond 128 at once.

use super::error::{SpecError, SpecErrors};

/// Largest spec text accepted, in bytes (1 MiB: the largest real specs are a
/// few KiB; the API's body limit is 2 MiB).
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// Deepest YAML nesting accepted (block indentation levels plus open flow
/// collections). Real specs nest about 8 deep.
pub const MAX_DEPTH: usize = 64;

fn refuse(reason: String, line: Option<usize>) -> SpecErrors {
    SpecErrors(vec![SpecError {
        document: 0,
        kind: None,
        name: None,
        path: String::new(),
        reason,
        line,
    }])
}

/// Refuses a text over [`MAX_SPEC_BYTES`].
pub fn check_size(text: &str) -> Result<(), SpecErrors> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(refuse(
            format!(
                "the spec is {} bytes, more than the {MAX_SPEC_BYTES} accepted: split it into several applies",
                text.len()
            ),
            None,
        ));
    }
    Ok(())
}

/// Refuses YAML nested deeper than [`MAX_DEPTH`]: block indentation levels
/// (each `- ` counts as one) plus flow collections open at that point
/// (brackets inside quotes and comments do not count). An over-estimate on
/// odd input (brackets in a literal block) only errs towards refusing text
/// that is already absurd.
pub fn check_yaml_depth(text: &str) -> Result<(), SpecErrors> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let body = line.trim_start_matches(' ');
        if flow == 0 && !body.is_empty() && !body.starts_with('#') {
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&i| i > indent) {
                indents.pop();
            }
            if indents.last() != Some(&indent) {
                indents.push(indent);
            }
        }
        let mut dashes = 0;
        let mut rest = body;
        while let Some(r) = rest.strip_prefix("- ") {
            dashes += 1;
            rest = r.trim_start_matches(' ');
        }
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        let mut escaped = false;
        for c in rest.chars() {
            match quote {
                Some('"') if escaped => escaped = false,
                Some('"') if c == '\\' => escaped = true,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '"' | '\'' => quote = Some(c),
                    '#' if prev == ' ' || prev == '\t' => break,
                    '[' | '{' => flow += 1,
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
            if indents.len() + dashes + flow > MAX_DEPTH {
                return Err(refuse(
                    format!(
                        "nesting deeper than {MAX_DEPTH} levels: refused before parsing (a spec nests about 8 deep)"
                    ),
                    Some(n + 1),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_or_large_text_is_refused_before_parsing() {
        let deep = "a: ".to_string() + &"[".repeat(50_000);
        let t = std::time::Instant::now();
        let e = check_yaml_depth(&deep).unwrap_err();
        eprintln!("50,000 levels refused in {:?}", t.elapsed());
        assert!(
            e.to_string().contains("nesting deeper than 64 levels"),
            "{e}"
        );
        assert_eq!(e.0[0].line, Some(1));

        // Block nesting counts too; quotes and comments do not.
        let mut block = String::new();
        for i in 0..70 {
            block.push_str(&" ".repeat(i * 2));
            block.push_str("k:\n");
        }
        assert!(check_yaml_depth(&block).is_err());
        let quoted = format!(
            "a: \"{}\"\nb: '{}' # {}\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        assert_eq!(check_yaml_depth(&quoted), Ok(()));
        let shop = include_str!("../../../examples/shop.yaml");
        assert_eq!(check_yaml_depth(shop), Ok(()));

        let big = "#".repeat(MAX_SPEC_BYTES + 1);
        let e = check_size(&big).unwrap_err();
        assert!(
            e.to_string()
                .contains("the spec is 1048577 bytes, more than the 1048576 accepted"),
            "{e}"
        );
        assert_eq!(check_size(shop), Ok(()));
    }
}
