//! D-AROS node agent library.
#![warn(missing_docs)]
