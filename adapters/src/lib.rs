//! D-AROS adapters.
#![warn(missing_docs)]
