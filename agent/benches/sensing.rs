//! Agent sensing benchmark (filled in below).
fn main() {}
