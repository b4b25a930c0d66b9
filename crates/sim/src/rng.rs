//! The simulator's only source of randomness: xoshiro256** seeded through SplitMix64 (both public
//! domain algorithms by Blackman and Vigna), written out here so that a seed means the same run on
//! every machine and every build, whatever a crate's next release changes.
//!
//! Invariant: nothing in the simulator draws a random number anywhere else (no `rand`, no
//! `Uuid::new_v4`, no clock, no hash-map iteration order).

/// One SplitMix64 step: a well-mixed 64-bit value from a counter.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded pseudo-random stream.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        Self {
            s: [
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
            ],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = hi.abs_diff(lo).saturating_add(1);
        lo.saturating_add_unsigned(self.below(span))
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// One element, uniformly.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        let n = u64::try_from(items.len()).ok()?;
        let i = usize::try_from(self.below(n)).ok()?;
        items.get(i).copied()
    }

    /// An exponentially distributed delay with the given mean (milliseconds, at least 1).
    pub fn exp_ms(&mut self, mean_ms: i64) -> i64 {
        // 53 random bits as a float in (0, 1].
        let u = ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let x = -u.ln() * mean_ms as f64;
        (x as i64).clamp(1, mean_ms.saturating_mul(20).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_stream_and_ranges_hold() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(43);
        assert_ne!(Rng::new(42).next_u64(), c.next_u64());
        for _ in 0..10_000 {
            let r = a.range(-3, 5);
            assert!((-3..=5).contains(&r));
            assert!(a.below(7) < 7);
            assert!(a.exp_ms(100) >= 1);
        }
        assert_eq!(a.range(4, 4), 4);
        assert_eq!(a.below(0), 0);
        assert_eq!(a.pick::<u8>(&[]), None);
    }
}
