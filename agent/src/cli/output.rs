//! Output formats (`-o table|json|yaml`), a plain-text table and unit formatting.

use std::io::Write;

use serde::Serialize;

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON (one document; `top` prints one per line).
    Json,
    /// YAML.
    Yaml,
}

/// Errors printing.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Serialisation failed.
    #[error("encoding output: {0}")]
    Encode(String),
    /// Writing to stdout failed.
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

/// Prints `value` as JSON or YAML, or calls `table` for the table format.
pub fn print<T: Serialize>(
    out: &mut impl Write,
    format: OutputFormat,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<(), OutputError> {
    match format {
        OutputFormat::Json => {
            let s = serde_json::to_string_pretty(value)
                .map_err(|e| OutputError::Encode(e.to_string()))?;
            writeln!(out, "{s}")?;
        }
        OutputFormat::Yaml => {
            let s =
                serde_yaml_ng::to_string(value).map_err(|e| OutputError::Encode(e.to_string()))?;
            write!(out, "{s}")?;
        }
        OutputFormat::Table => write!(out, "{}", table())?,
    }
    Ok(())
}

/// A table with a header row; numeric-looking columns are right-aligned.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these column titles; `right[i]` right-aligns column i.
    pub fn new(header: &[&str], right: &[bool]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
            right: right.to_vec(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True without rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut w = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(cols) {
                let pad = w[i] - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right.get(i).copied().unwrap_or(false) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i + 1 < cols {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1536` → `1.5Ki`; binary units.
pub fn bytes(v: u64) -> String {
    const UNITS: &[&str] = &["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v}")
    } else {
        format!("{x:.1}{}", UNITS[i])
    }
}

/// Optional byte rate → `1.5Mi/s` or `-`.
pub fn rate_bytes(v: Option<f64>) -> String {
    match v {
        Some(r) if r.is_finite() && r >= 0.0 => format!("{}/s", bytes(r.round() as u64)),
        _ => "-".into(),
    }
}

/// Optional number with `prec` decimals or `-`.
pub fn num(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

/// Optional ratio (0..1) as a percentage or `-`.
pub fn pct(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{:.1}%", x * 100.0),
        _ => "-".into(),
    }
}

/// A time in ms since the epoch as this machine's local time,
/// `2026-11-24 23:05:01.123`.
pub fn local_time(t: daros_coordinator::Timestamp) -> String {
    use chrono::TimeZone as _;
    i64::try_from(t.0)
        .ok()
        .and_then(|ms| chrono::Local.timestamp_millis_opt(ms).single())
        .map_or_else(
            || t.to_string(),
            |d| d.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        )
}

/// Seconds → `3d4h`, `5m12s`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_times_read_as_dates() {
        let s = local_time(daros_coordinator::Timestamp(1_795_561_618_092));
        assert!(s.starts_with("2026-11-2"), "{s}");
        assert_eq!(s.len(), "2026-11-24 23:05:01.092".len(), "{s}");
        assert!(s.ends_with(".092"), "{s}");
    }

    #[test]
    fn units() {
        assert_eq!(bytes(512), "512");
        assert_eq!(bytes(1536), "1.5Ki");
        assert_eq!(bytes(64 * 1024 * 1024), "64.0Mi");
        assert_eq!(rate_bytes(None), "-");
        assert_eq!(rate_bytes(Some(2048.0)), "2.0Ki/s");
        assert_eq!(pct(Some(0.256)), "25.6%");
        assert_eq!(num(Some(f64::NAN), 2), "-");
        assert_eq!(duration(3725.0), "1h2m");
    }

    #[test]
    fn table_alignment() {
        let mut t = Table::new(&["ID", "CPU"], &[false, true]);
        t.row(vec!["managed/web".into(), "0.50".into()]);
        t.row(vec!["a".into(), "12.00".into()]);
        assert_eq!(
            t.render(),
            "ID             CPU\nmanaged/web   0.50\na            12.00\n"
        );
    }
}
