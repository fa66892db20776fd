//! Exchange feed formats.
