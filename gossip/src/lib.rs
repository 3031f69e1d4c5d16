//! D-AROS gossip.
#![warn(missing_docs)]
