//! A bounds-checked cursor over Kafka's primitive types (big-endian integers, unsigned varints,
//! i16- and compact-length strings), for the record formats built from them: the coordinators'
//! `__consumer_offsets` and `__transaction_state` records (`millrace-groups`,
//! `millrace-transactions`). Every read checks that its bytes are there before taking them, and
//! every length is checked against the caller's bound before anything is sized by it, so
//! truncated or hostile input fails cleanly with a [`ReaderError`].
//!
//! Varints: Kafka's `readUnsignedVarint` reads at most 5 bytes and a value of at most
//! `u32::MAX`; [`Reader::new`] reads so. [`Reader::with_long_varints`] reads up to 10 bytes, a
//! `u64` (what the `__consumer_offsets` codec has always accepted).

/// Why a read failed. Each coordinator's record error has a variant of the same name and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReaderError {
    /// Fewer bytes left than the read needs.
    #[error("record truncated")]
    Truncated,
    /// A length (or varint) out of bounds; -1 where the value itself is not known.
    #[error("invalid length {0}")]
    BadLength(i64),
    /// A string that is not UTF-8.
    #[error("string is not UTF-8")]
    NotUtf8,
    /// Bytes left over after the last field.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// A cursor over `buf`; each read consumes what it returns.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// Varints of up to 10 bytes (a `u64`) rather than Kafka's 5 (a `u32`).
    long_varints: bool,
}

impl<'a> Reader<'a> {
    /// A reader whose varints are Kafka's: at most 5 bytes, at most `u32::MAX`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            long_varints: false,
        }
    }

    /// A reader whose varints may take up to 10 bytes, a `u64`.
    pub fn with_long_varints(buf: &'a [u8]) -> Self {
        Self {
            buf,
            long_varints: true,
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ReaderError> {
        if n > self.buf.len() {
            return Err(ReaderError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes, as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ReaderError> {
        let b = self.take(N)?;
        <[u8; N]>::try_from(b).map_err(|_| ReaderError::Truncated)
    }

    pub fn i8(&mut self) -> Result<i8, ReaderError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    pub fn i16(&mut self) -> Result<i16, ReaderError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, ReaderError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, ReaderError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// An unsigned varint: at most 5 bytes and `u32::MAX`, or 10 bytes with long varints.
    pub fn uvarint(&mut self) -> Result<u64, ReaderError> {
        let bits = if self.long_varints { 64 } else { 35 };
        let mut v = 0u64;
        for shift in (0..bits).step_by(7) {
            let b = self.array::<1>()?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if !self.long_varints && v > u64::from(u32::MAX) {
                    return Err(ReaderError::BadLength(-1));
                }
                return Ok(v);
            }
        }
        Err(ReaderError::BadLength(-1))
    }

    /// `len` bytes of UTF-8.
    pub fn utf8(&mut self, len: usize) -> Result<String, ReaderError> {
        let b = self.take(len)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| ReaderError::NotUtf8)
    }

    /// An i16-length string (negative = null), at most `max` bytes.
    pub fn nullable_string(&mut self, max: usize) -> Result<Option<String>, ReaderError> {
        let len = self.i16()?;
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        if len > max {
            return Err(ReaderError::BadLength(len as i64));
        }
        self.utf8(len).map(Some)
    }

    /// A compact length (uvarint n+1; `None` for 0 = null), at most `max`.
    pub fn compact_len(&mut self, max: usize) -> Result<Option<usize>, ReaderError> {
        let n = self.uvarint()?;
        let Some(len) = n.checked_sub(1) else {
            return Ok(None);
        };
        let len = usize::try_from(len).map_err(|_| ReaderError::BadLength(-1))?;
        if len > max {
            return Err(ReaderError::BadLength(
                i64::try_from(len).unwrap_or(i64::MAX),
            ));
        }
        Ok(Some(len))
    }

    /// A compact string (uvarint n+1, 0 = null), at most `max` bytes.
    pub fn compact_nullable_string(&mut self, max: usize) -> Result<Option<String>, ReaderError> {
        let Some(len) = self.compact_len(max)? else {
            return Ok(None);
        };
        self.utf8(len).map(Some)
    }

    /// `Ok` if every byte was read.
    pub fn finish(&self) -> Result<(), ReaderError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ReaderError::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fail_cleanly_on_short_input() {
        let mut r = Reader::new(&[0, 1, 2]);
        assert_eq!(r.i16(), Ok(1));
        assert_eq!(r.i32(), Err(ReaderError::Truncated));
        assert_eq!(r.finish(), Err(ReaderError::Trailing(1)));
        assert_eq!(r.i8(), Ok(2));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn varints_are_bounded() {
        // u32::MAX + 1 in 5 bytes: too large for Kafka's varint, fine as a long one.
        let big = [0x80, 0x80, 0x80, 0x80, 0x10];
        assert_eq!(Reader::new(&big).uvarint(), Err(ReaderError::BadLength(-1)));
        assert_eq!(Reader::with_long_varints(&big).uvarint(), Ok(1 << 32));
        // Six bytes: too long for Kafka's varint.
        let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(
            Reader::new(&long).uvarint(),
            Err(ReaderError::BadLength(-1))
        );
        assert_eq!(Reader::with_long_varints(&long).uvarint(), Ok(0));
        assert_eq!(Reader::new(&[0x80]).uvarint(), Err(ReaderError::Truncated));
    }

    #[test]
    fn strings_respect_their_bounds() {
        let mut r = Reader::new(&[0, 2, b'h', b'i', 0xff, 0xff]);
        assert_eq!(r.nullable_string(2), Ok(Some("hi".into())));
        assert_eq!(r.nullable_string(2), Ok(None));
        assert_eq!(
            Reader::new(&[0, 3, b'a', b'b', b'c']).nullable_string(2),
            Err(ReaderError::BadLength(3))
        );
        assert_eq!(
            Reader::new(&[3, b'h', b'i']).compact_nullable_string(8),
            Ok(Some("hi".into()))
        );
        assert_eq!(Reader::new(&[0]).compact_nullable_string(8), Ok(None));
        assert_eq!(
            Reader::new(&[2, 0xff]).compact_nullable_string(8),
            Err(ReaderError::NotUtf8)
        );
    }
}
