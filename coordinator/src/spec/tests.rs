//! Spec parsing tests.
