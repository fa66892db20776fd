//! What the arbiter believes: evidence for a change it does not yet
//! follow (another session name, a sequence number far ahead of the one
//! it is delivering), gathered packet by packet on lines A and B.

use super::Line;

/// The bit of `line` in a set of lines (A = 1, B = 2); the re-request
/// server's answers are no evidence of anything and have none.
pub(super) fn line_bit(line: Line) -> u8 {
    match line {
        Line::A => 1,
        Line::B => 2,
        Line::Recovery => 0,
    }
}

/// The index of `line` in per-line (A, B) arrays.
pub(super) fn line_index(line: Line) -> Option<usize> {
    match line {
        Line::A => Some(0),
        Line::B => Some(1),
        Line::Recovery => None,
    }
}

/// A run of packets that continue one another on each line: each packet
/// on a line starts where that line's previous one ended. A/B copies of a
/// genuine feed form one run; a flood of forged or random packets does
/// not, because one packet out of line starts the run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    /// Sequence number of the run's first packet.
    pub start: u64,
    /// Per line (A, B): where its next packet must start.
    next: [Option<u64>; 2],
    /// Per line (A, B): packets in the run.
    packets: [u32; 2],
}

impl Run {
    /// A run of one packet `[first, end)` on line index `i` (0 A, 1 B).
    pub fn new(i: usize, first: u64, end: u64) -> Self {
        let mut r = Self {
            start: first,
            next: [None; 2],
            packets: [0; 2],
        };
        r.push(i, end);
        r
    }

    /// Adds the packet `[first, end)` on line index `i` to `run` if it
    /// continues it, else starts `run` over from it; returns the run.
    pub fn advance(run: &mut Option<Run>, i: usize, first: u64, end: u64) -> Run {
        match run {
            Some(r) if r.extends(i, first, end) => {
                // A line joining the run may show where it began.
                r.start = r.start.min(first);
                r.push(i, end);
            }
            _ => *run = Some(Run::new(i, first, end)),
        }
        run.unwrap_or_else(|| Run::new(i, first, end))
    }

    /// True if a packet `[first, end)` on line index `i` continues the
    /// run: it starts where that line left off, or, on a line that has not
    /// carried the run yet, it overlaps or touches what the other line has
    /// shown.
    pub fn extends(&self, i: usize, first: u64, end: u64) -> bool {
        match self.next[i] {
            Some(n) => first == n,
            None => first <= self.high() && end >= self.start,
        }
    }

    /// Adds a packet ending at `end` on line index `i`.
    pub fn push(&mut self, i: usize, end: u64) {
        self.next[i] = Some(end);
        self.packets[i] = self.packets[i].saturating_add(1);
    }

    fn high(&self) -> u64 {
        self.next
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(self.start)
    }

    /// The lines that carried the run.
    pub fn lines(&self) -> u8 {
        u8::from(self.packets[0] > 0) | (u8::from(self.packets[1] > 0) << 1)
    }

    /// True once `need` packets carried the run, at least half of them
    /// (rounded down, at least one) on each line of `lines`.
    pub fn confirmed(&self, need: u32, lines: u8) -> bool {
        let per_line = (need / 2).max(1);
        self.packets[0].saturating_add(self.packets[1]) >= need
            && (0..2).all(|i| lines & (1 << i) == 0 || self.packets[i] >= per_line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_needs_contiguous_packets_on_every_line_asked_for() {
        let mut r = Run::new(0, 10, 12);
        assert!(r.extends(0, 12, 13) && !r.extends(0, 13, 14) && !r.extends(0, 11, 12));
        // B has not carried it: anything overlapping what A has shown
        // continues it.
        assert!(r.extends(1, 10, 12) && r.extends(1, 12, 12) && r.extends(1, 8, 10));
        assert!(!r.extends(1, 13, 14) && !r.extends(1, 5, 9));
        r.push(0, 14);
        assert!(r.confirmed(2, 1));
        assert!(!r.confirmed(2, 3), "B has carried none");
        r.push(1, 12);
        assert!(r.confirmed(2, 3) && r.confirmed(3, 3) && !r.confirmed(4, 3));
        assert_eq!(r.lines(), 3);
    }
}
