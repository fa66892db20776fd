//! Stock locate to symbol map, filled from Stock Directory messages.

use super::Message;
use crate::alpha::Stock;

/// Maps stock locate codes to symbols, as the day's Stock Directory (`R`)
/// messages define them.
///
/// Locate codes are 16-bit, so the table is preallocated with one slot per
/// possible code (65,536) at construction: updates and lookups are an index,
/// never an allocation or a hash.
#[derive(Clone)]
pub struct Directory {
    // One slot per locate code; the index is the code.
    symbols: Box<[Option<Stock>]>,
    known: usize,
}

impl Directory {
    /// Number of slots: every possible locate code.
    pub const CAPACITY: usize = 1 << 16;

    /// An empty directory with all 65,536 slots allocated.
    pub fn new() -> Self {
        Self {
            symbols: vec![None; Self::CAPACITY].into_boxed_slice(),
            known: 0,
        }
    }

    /// Records `stock` for `locate`, returning the symbol it replaces.
    pub fn insert(&mut self, locate: u16, stock: Stock) -> Option<Stock> {
        let slot = self.symbols.get_mut(usize::from(locate))?;
        let old = slot.replace(stock);
        if old.is_none() {
            self.known += 1;
        }
        old
    }

    /// Records the symbol of a Stock Directory message; ignores every other
    /// type. Returns true if the message was a Stock Directory.
    pub fn apply(&mut self, msg: &Message<'_>) -> bool {
        if let Message::StockDirectory(r) = msg {
            self.insert(r.stock_locate(), r.stock());
            true
        } else {
            false
        }
    }

    /// The symbol of `locate`, if a Stock Directory message named it.
    pub fn get(&self, locate: u16) -> Option<&Stock> {
        self.symbols.get(usize::from(locate))?.as_ref()
    }

    /// The locate code of `stock`. A linear scan: meant for set-up and
    /// tests, not per-message lookups.
    pub fn locate_of(&self, stock: &Stock) -> Option<u16> {
        self.iter().find(|(_, s)| *s == stock).map(|(l, _)| l)
    }

    /// Number of locate codes with a symbol.
    pub fn len(&self) -> usize {
        self.known
    }

    /// True before any symbol is recorded.
    pub fn is_empty(&self) -> bool {
        self.known == 0
    }

    /// Forgets every symbol, keeping the allocation (for a new day).
    pub fn clear(&mut self) {
        self.symbols.fill(None);
        self.known = 0;
    }

    /// The known `(locate, symbol)` pairs in locate order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &Stock)> + '_ {
        // `zip` with the u16 range keeps the index typed without a cast; the
        // table has exactly 65,536 slots, so the range covers it.
        (0..=u16::MAX)
            .zip(self.symbols.iter())
            .filter_map(|(l, s)| s.as_ref().map(|s| (l, s)))
    }
}

impl Default for Directory {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::itch::{self, Header, StockDirectory, Timestamp};

    #[test]
    fn stock_directory_messages_fill_it() {
        let r = StockDirectory {
            header: Header {
                stock_locate: 65_535,
                tracking_number: 0,
                timestamp: Timestamp::MIDNIGHT,
            },
            stock: Stock::new("ZVZZT").unwrap(),
            market_category: b'Q',
            financial_status_indicator: b'N',
            round_lot_size: 100,
            round_lots_only: b'N',
            issue_classification: b'C',
            issue_sub_type: crate::alpha::Alpha(*b"Z "),
            authenticity: b'T',
            short_sale_threshold_indicator: b'N',
            ipo_flag: b' ',
            luld_reference_price_tier: b'1',
            etp_flag: b'N',
            etp_leverage_factor: 0,
            inverse_indicator: b'N',
        };
        let mut buf = [0; itch::MAX_MESSAGE_LEN];
        let n = r.encode(&mut buf).unwrap();
        let mut dir = Directory::new();
        assert!(dir.is_empty());
        assert!(dir.apply(&itch::decode(&buf[..n]).unwrap()));
        assert_eq!(dir.get(65_535).and_then(|s| s.as_str()), Some("ZVZZT"));
        assert_eq!(dir.get(1), None);
        assert_eq!(dir.len(), 1);
        assert_eq!(dir.locate_of(&Stock::new("ZVZZT").unwrap()), Some(65_535));
        dir.clear();
        assert!(dir.is_empty());
        assert_eq!(dir.get(65_535), None);
    }
}
