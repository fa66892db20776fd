//! The generator's own pseudo-random numbers: xoshiro256** seeded through
//! SplitMix64 (Blackman and Vigna, "Scrambled linear pseudorandom number
//! generators", 2021), plus the few distributions the session needs.
//!
//! Kept in-crate rather than taken from `rand` so a seed gives the same
//! session forever: `rand` may change its algorithms between versions, and
//! the float math here uses only IEEE-754 basic operations (no platform
//! `ln`/`exp`), which round identically on every target.

/// xoshiro256** state.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Seeds the four state words from SplitMix64, which never yields the
    /// all-zero state xoshiro cannot leave.
    pub(crate) fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Self {
            s: [next(), next(), next(), next()],
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift; the tiny
    /// bias for huge `n` does not matter for a synthetic feed.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An exponential variate with mean 1.
    pub(crate) fn exp1(&mut self) -> f64 {
        // 1 - unit() is in (0, 1], so the logarithm is finite.
        -ln(1.0 - self.unit())
    }
}

/// Natural logarithm of `x` in `(0, 1]` using only +, -, *, /: split off
/// the binary exponent, then `ln m = 2 atanh((m - 1) / (m + 1))` by its
/// series. Accurate to a few ulps, and bit-identical on every platform.
fn ln(x: f64) -> f64 {
    const LN_2: f64 = std::f64::consts::LN_2;
    let bits = x.to_bits();
    // x = m * 2^e with m in [0.5, 1); inputs here are normal numbers.
    let e = ((bits >> 52) & 0x7ff) as i64 - 1022;
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1022 << 52));
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let mut term = z;
    let mut sum = 0.0;
    // |z| <= 1/3, so 20 terms reach far below f64 precision.
    for k in 0..20 {
        sum += term / f64::from(2 * k + 1);
        term *= z2;
    }
    2.0 * sum + e as f64 * LN_2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn ln_matches_std_closely() {
        for &x in &[1.0, 0.5, 0.1, 1e-3, 1e-9, 2f64.powi(-53), 0.999_999, 0.75] {
            let ours = ln(x);
            let std = x.ln();
            assert!(
                (ours - std).abs() <= 1e-13 * std.abs().max(1.0),
                "ln({x}) = {ours}, std says {std}"
            );
        }
    }

    #[test]
    fn distributions_stay_in_range() {
        let mut r = Rng::new(1);
        let mut sum = 0.0;
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let v = r.range(5, 7);
            assert!((5..=7).contains(&v));
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            let e = r.exp1();
            assert!(e >= 0.0 && e.is_finite());
            sum += e;
        }
        // Mean of 10,000 unit exponentials: 1 within a generous margin.
        assert!((sum / 10_000.0 - 1.0).abs() < 0.05);
    }
}
