//! The stable run of a cargo-fuzz target: its seed corpus, and inputs
//! drawn from random bytes and from seeds with a few bytes overwritten,
//! inserted or cut. Every crate with fuzz targets runs them this way in
//! its ordinary tests; `cargo +nightly fuzz run TARGET` explores further.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

/// `fuzz/seeds/TARGET` under a crate's directory (its
/// `CARGO_MANIFEST_DIR`).
pub fn seed_dir(manifest_dir: &str, target: &str) -> PathBuf {
    Path::new(manifest_dir).join("fuzz/seeds").join(target)
}

/// The seed files of `dir`, in name order; panics naming the directory
/// when it cannot be read.
pub fn seeds(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|e| e.expect("a seed corpus entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("seed {}: {e}", f.display())))
        .collect()
}

/// Random bytes (up to `max_random` of them), or one of `seeds` with a
/// few bytes overwritten, inserted or cut.
pub fn mutated_or_random(seeds: Vec<Vec<u8>>, max_random: usize) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "a fuzz target needs seeds to mutate");
    let n = seeds.len();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..max_random),
        (
            0..n,
            proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..10)
        )
            .prop_map(move |(i, edits)| {
                let mut s = seeds[i].clone();
                for (at, byte, how) in edits {
                    let at = if s.is_empty() { 0 } else { at % (s.len() + 1) };
                    match how {
                        0 if at < s.len() => s[at] = byte,
                        1 => s.insert(at, byte),
                        _ => s.truncate(at),
                    }
                }
                s
            }),
    ]
}

/// Inputs per target: 3,000, or `MDBUS_FUZZ_CASES` for a longer run.
pub fn cases() -> u32 {
    std::env::var("MDBUS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

/// A fuzz target: panics when a property breaks.
pub type Target = fn(&[u8]);

/// The seed corpora of one crate (`fuzz/seeds/TARGET` under its
/// `CARGO_MANIFEST_DIR`): what every crate's fuzz test file needs, in one
/// place.
#[derive(Clone, Copy)]
pub struct Corpus {
    manifest_dir: &'static str,
}

impl Corpus {
    /// The corpora under `manifest_dir` (pass `env!("CARGO_MANIFEST_DIR")`).
    pub const fn new(manifest_dir: &'static str) -> Self {
        Corpus { manifest_dir }
    }

    /// The directory of `target`'s seeds.
    pub fn dir(&self, target: &str) -> PathBuf {
        seed_dir(self.manifest_dir, target)
    }

    /// `target`'s seeds, in name order.
    pub fn seeds(&self, target: &str) -> Vec<Vec<u8>> {
        seeds(&self.dir(target))
    }

    /// Runs every target over its own seeds, each of which must have at
    /// least `min_seeds` of them.
    pub fn check_seeds(&self, targets: &[(&str, Target)], min_seeds: usize) {
        for (name, target) in targets {
            let seeds = self.seeds(name);
            assert!(seeds.len() >= min_seeds, "{name}: {} seeds", seeds.len());
            for s in &seeds {
                target(s);
            }
        }
    }

    /// Random bytes (up to `max_random`), or one of `target`'s seeds with
    /// a few bytes overwritten, inserted or cut.
    pub fn input(&self, target: &str, max_random: usize) -> impl Strategy<Value = Vec<u8>> {
        mutated_or_random(self.seeds(target), max_random)
    }

    /// Writes `bytes` as the seed `name` of `target`, creating its
    /// directory (for the ignored tests that regenerate corpora).
    pub fn write_seed(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.dir(target);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let file = dir.join(name);
        std::fs::write(&file, bytes).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}
