//! xorshift64* (Vigna, "An experimental exploration of Marsaglia's
//! xorshift generators, scrambled", 2016): the one small, allocation-free
//! generator the recovery code draws from, for the subscribers' NAK waits
//! and the simulated networks. Not for anything secret.

/// A generator state (never 0).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// Seeded through splitmix64, so that close seeds give unrelated
    /// sequences.
    #[cfg(test)]
    pub(crate) fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// Starts from `state` itself (made odd, so never 0).
    pub(crate) fn from_state(state: u64) -> Rng {
        Rng(state | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    #[cfg(test)]
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `ppm` per million.
    #[cfg(test)]
    pub(crate) fn chance(&mut self, ppm: u32) -> bool {
        self.next_u64() % 1_000_000 < ppm as u64
    }

    /// True with probability `p`.
    pub(crate) fn chance_of(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}
