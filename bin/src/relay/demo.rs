//! `mdbus-relay --demo`.
