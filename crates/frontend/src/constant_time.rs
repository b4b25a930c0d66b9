//! Comparison of secrets (a PLAIN password, a SCRAM stored key) in time that does not depend on
//! where they differ, so that a client cannot learn a secret byte by byte from response times.
//!
//! Used by [`crate::sasl`] (PLAIN) and [`crate::scram`]; it sits below both so that neither has
//! to reach into the other for it.

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in b.iter().enumerate() {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ x);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn equal_only_when_bytes_and_lengths_match() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"secret!", b"secret"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
