//! Channel names: they become file names and wire identifiers, so they are
//! kept to a small, safe alphabet.

/// Longest accepted name.
pub const MAX_NAME: usize = 64;

/// Checks that `name` is 1 to 64 characters from `A-Z a-z 0-9 . _ -` and is
/// not `.` or `..`.
pub fn check(name: &str) -> Result<(), crate::Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(crate::Error::BadName { name: name.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn accepts_the_alphabet_and_rejects_the_rest() {
        assert!(check("md.nasdaq-A_1").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(check(bad).is_err(), "{bad:?} accepted");
        }
    }
}
