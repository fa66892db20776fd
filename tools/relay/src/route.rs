//! Which stream each ITCH message goes to.
//!
//! A message's stream follows from its stock locate, through a table of
//! 65,536 entries (one per possible locate) allocated once: routing a
//! message is an index, never a hash or an allocation.
//!
//! - **Stock Directory** (`R`): names a locate's symbol; the router works
//!   out the symbol's stream (symbol lists, then ranges, then the default
//!   stream; or the hash partition) and stores it in the table. The
//!   message itself goes to that stream.
//! - **System-wide** messages: System Event (`S`), the market-wide circuit
//!   breaker messages (`V`, `W`) and any message with locate 0 go to every
//!   stream or to the control stream (`routing.system`).
//! - **Per-stock** messages (orders, executions, trades, trading actions,
//!   ...) go to their locate's stream.
//! - A locate no Stock Directory has named yet (a relay that joined late):
//!   a message that carries a symbol (`A`, `F`, `H`, `Y`, `L`, `K`, `J`,
//!   `h`, `P`, `Q`, `I`, `N`, `O`) teaches the router that locate's symbol,
//!   and goes to its stream; one that does not (`E`, `C`, `X`, `D`, `U`,
//!   `B`) goes to the control stream, or is dropped and counted when
//!   there is none or `routing.unknown = "drop"`.
//! - A symbol no stream claims (lists without a default stream) is
//!   dropped and counted.
//!
//! Per-stream order is the feed's order: the relay routes messages one at
//! a time in sequence order and each stream has one publisher.

use mdbus_feed::alpha::{Alpha, Stock};

use super::config::{RoutingConfig, RoutingMode, SystemRoute, UnknownRoute};

/// Table entry: no Stock Directory has named the locate yet.
const UNKNOWN: u16 = u16::MAX;
/// Table entry: the locate's symbol belongs to no stream.
const UNMATCHED: u16 = u16::MAX - 1;

/// [`TYPE_CLASS`]: a type routed by its locate alone.
const ORDINARY: u8 = 0;
/// [`TYPE_CLASS`]: system-wide (`S`, `V`, `W`) or Stock Directory (`R`).
const SPECIAL: u8 = 1;

/// Per type byte: whether [`Router::route`]'s common case may route it.
const TYPE_CLASS: [u8; 256] = {
    let mut t = [ORDINARY; 256];
    t[b'S' as usize] = SPECIAL;
    t[b'V' as usize] = SPECIAL;
    t[b'W' as usize] = SPECIAL;
    t[b'R' as usize] = SPECIAL;
    t
};

/// Where one message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To one stream (its index in the relay's stream list).
    Stream(u16),
    /// To every stream.
    All,
    /// Nowhere: its locate is not known yet and there is no control
    /// stream for it.
    DropUnknown,
    /// Nowhere: its symbol belongs to no stream.
    DropUnmatched,
}

/// How symbols map to streams.
#[derive(Debug, Clone)]
enum Rules {
    Lists {
        /// Listed symbols, sorted, with their stream.
        symbols: Vec<(Stock, u16)>,
        /// Ranges in configuration order: first, last, stream.
        ranges: Vec<(Vec<u8>, Vec<u8>, u16)>,
        default: Option<u16>,
    },
    Hash {
        /// Stream index of partition 0; partitions are consecutive.
        first: u16,
        partitions: u16,
    },
}

/// The router: built once from the configuration, then used per message.
#[derive(Debug, Clone)]
pub struct Router {
    /// One entry per possible locate: indexing by a `u16` needs no
    /// bounds check.
    table: Box<[u16; 1 << 16]>,
    rules: Rules,
    system: Route,
    unknown: Route,
    streams: usize,
}

/// Offset of the 8-byte symbol in a message of type `t`, for the types
/// that carry one.
fn stock_offset(t: u8) -> Option<usize> {
    match t {
        b'R' | b'H' | b'Y' | b'K' | b'J' | b'h' | b'N' | b'O' => Some(11),
        b'L' => Some(15),
        b'A' | b'F' | b'P' => Some(24),
        b'Q' => Some(19),
        b'I' => Some(28),
        _ => None,
    }
}

/// FNV-1a of the 8 padded symbol bytes: stable across builds, platforms
/// and days, so a symbol stays on its partition.
pub fn symbol_hash(stock: &Stock) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in stock.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn trimmed(stock: &Stock) -> &[u8] {
    let b = stock.as_bytes();
    let end = b.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    &b[..end]
}

impl Router {
    /// A router for `cfg`, publishing on `names` (the relay's streams, as
    /// [`RelayConfig::stream_names`](super::config::RelayConfig::stream_names)
    /// lists them). `cfg` must have passed validation.
    pub fn new(cfg: &RoutingConfig, names: &[String]) -> Router {
        let index = |name: &str| -> Option<u16> {
            names
                .iter()
                .position(|n| n == name)
                .and_then(|i| u16::try_from(i).ok())
        };
        let control = (!cfg.control.is_empty())
            .then(|| index(&cfg.control))
            .flatten();
        let rules = match cfg.mode {
            RoutingMode::Lists => {
                let mut symbols = Vec::new();
                let mut ranges = Vec::new();
                for s in &cfg.streams {
                    let Some(i) = index(&s.name) else { continue };
                    for sym in &s.symbols {
                        if let Some(stock) = super::config::parse_symbol(sym) {
                            // The first stream that lists a symbol keeps it.
                            if !symbols.iter().any(|(x, _)| *x == stock) {
                                symbols.push((stock, i));
                            }
                        }
                    }
                    for [lo, hi] in &s.ranges {
                        ranges.push((lo.as_bytes().to_vec(), hi.as_bytes().to_vec(), i));
                    }
                }
                symbols.sort();
                Rules::Lists {
                    symbols,
                    ranges,
                    default: (!cfg.default.is_empty())
                        .then(|| index(&cfg.default))
                        .flatten(),
                }
            }
            RoutingMode::Hash => Rules::Hash {
                first: index(&format!("{}-0", cfg.hash_prefix)).unwrap_or(0),
                partitions: cfg.hash_streams.max(1),
            },
        };
        let system = match (cfg.system, control) {
            (SystemRoute::Control, Some(c)) => Route::Stream(c),
            _ => Route::All,
        };
        let unknown = match (cfg.unknown, control) {
            (UnknownRoute::Control, Some(c)) => Route::Stream(c),
            _ => Route::DropUnknown,
        };
        Router {
            table: Box::new([UNKNOWN; 1 << 16]),
            rules,
            system,
            unknown,
            streams: names.len(),
        }
    }

    /// Number of streams.
    pub fn streams(&self) -> usize {
        self.streams
    }

    /// The stream of `stock` by the rules alone, or `None` when no stream
    /// claims it. Allocation-free.
    pub fn stream_of_symbol(&self, stock: &Stock) -> Option<u16> {
        match &self.rules {
            Rules::Lists {
                symbols,
                ranges,
                default,
            } => {
                if let Ok(i) = symbols.binary_search_by(|(s, _)| s.cmp(stock)) {
                    return Some(symbols[i].1);
                }
                let sym = trimmed(stock);
                for (lo, hi, i) in ranges {
                    let head = &sym[..sym.len().min(hi.len())];
                    if sym >= lo.as_slice() && head <= hi.as_slice() {
                        return Some(*i);
                    }
                }
                *default
            }
            Rules::Hash { first, partitions } => {
                let p = (symbol_hash(stock) % u64::from(*partitions)) as u16;
                Some(first + p)
            }
        }
    }

    fn learn(&mut self, locate: u16, stock: &Stock) -> Route {
        let s = self.stream_of_symbol(stock).unwrap_or(UNMATCHED);
        self.table[usize::from(locate)] = s;
        if s == UNMATCHED {
            Route::DropUnmatched
        } else {
            Route::Stream(s)
        }
    }

    /// The route of one ITCH message (already checked to be a whole
    /// message of a known type). Stock Directory messages, and messages
    /// that carry a symbol for a locate not yet known, update the table.
    #[inline]
    pub fn route(&mut self, msg: &[u8]) -> Route {
        // The common case first: a message of a type that neither names
        // a symbol's locate (`R`) nor is system-wide, for a known locate
        // that has a stream; one table load for the type, one for the
        // locate.
        if let [t, hi, lo, ..] = *msg {
            let locate = u16::from_be_bytes([hi, lo]);
            if TYPE_CLASS[usize::from(t)] == ORDINARY && locate != 0 {
                let s = self.table[usize::from(locate)];
                if s < UNMATCHED {
                    return Route::Stream(s);
                }
            }
        }
        self.route_other(msg)
    }

    /// [`Router::route`] for every other message.
    #[inline(never)]
    fn route_other(&mut self, msg: &[u8]) -> Route {
        let (Some(&t), Some(hi), Some(lo)) = (msg.first(), msg.get(1), msg.get(2)) else {
            return self.unknown;
        };
        if matches!(t, b'S' | b'V' | b'W') {
            return self.system;
        }
        let locate = u16::from_be_bytes([*hi, *lo]);
        if locate == 0 {
            return self.system;
        }
        let stock = |off: usize| -> Option<Stock> {
            let b: [u8; 8] = msg.get(off..off + 8)?.try_into().ok()?;
            Some(Alpha(b))
        };
        if t == b'R' {
            if let Some(s) = stock(11) {
                return self.learn(locate, &s);
            }
        }
        match self.table[usize::from(locate)] {
            UNKNOWN => match stock_offset(t).and_then(stock) {
                Some(s) => self.learn(locate, &s),
                None => self.unknown,
            },
            UNMATCHED => Route::DropUnmatched,
            s => Route::Stream(s),
        }
    }

    /// The stream recorded for `locate`, if one is.
    pub fn stream_of_locate(&self, locate: u16) -> Option<u16> {
        match self.table[usize::from(locate)] {
            UNKNOWN | UNMATCHED => None,
            s => Some(s),
        }
    }

    /// Forgets every locate (a new session names them again).
    pub fn clear(&mut self) {
        self.table.fill(UNKNOWN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RelayConfig;
    use mdbus_feed::itch::{self, Header, Timestamp};

    fn router(toml_routing: &str) -> (Router, Vec<String>) {
        let text = format!("[input]\nkind = \"binaryfile\"\npath = \"/x\"\n{toml_routing}");
        let cfg = RelayConfig::from_toml_str(&text, "<t>").unwrap();
        let names = cfg.stream_names();
        (Router::new(&cfg.routing, &names), names)
    }

    fn header(locate: u16) -> Header {
        Header {
            stock_locate: locate,
            tracking_number: 0,
            timestamp: Timestamp::MIDNIGHT,
        }
    }

    fn encode(m: &itch::OwnedMessage) -> Vec<u8> {
        let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
        let n = m.encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    fn directory(locate: u16, sym: &str) -> Vec<u8> {
        let mut bytes = [b' '; 39];
        bytes[0] = b'R';
        bytes[1..3].copy_from_slice(&locate.to_be_bytes());
        bytes[11..11 + sym.len()].copy_from_slice(sym.as_bytes());
        assert!(itch::decode(&bytes).is_ok());
        bytes.to_vec()
    }

    fn delete(locate: u16) -> Vec<u8> {
        encode(&itch::OwnedMessage::OrderDelete(itch::OrderDelete {
            header: header(locate),
            order_reference_number: 1,
        }))
    }

    fn add(locate: u16, sym: &str) -> Vec<u8> {
        encode(&itch::OwnedMessage::AddOrder(itch::AddOrder {
            header: header(locate),
            order_reference_number: 1,
            buy_sell_indicator: b'B',
            shares: 100,
            stock: Stock::new(sym).unwrap(),
            price: itch::Price4(1),
        }))
    }

    fn system_event(locate: u16) -> Vec<u8> {
        encode(&itch::OwnedMessage::SystemEvent(itch::SystemEvent {
            header: header(locate),
            event_code: b'O',
        }))
    }

    const LISTS: &str = r#"
[routing]
mode = "lists"
control = "ctl"
default = "rest"
[[routing.streams]]
name = "big"
symbols = ["MSFT", "AAPL"]
[[routing.streams]]
name = "a-f"
ranges = [["A", "F"]]
[[routing.streams]]
name = "g-m"
ranges = [["G", "M"]]
"#;

    #[test]
    fn symbol_lists_come_before_ranges_then_the_default() {
        let (r, names) = router(LISTS);
        assert_eq!(names, ["big", "a-f", "g-m", "rest", "ctl"]);
        let s = |x: &str| r.stream_of_symbol(&Stock::new(x).unwrap());
        assert_eq!(s("AAPL"), Some(0));
        assert_eq!(s("MSFT"), Some(0));
        assert_eq!(s("A"), Some(1));
        assert_eq!(s("AMZN"), Some(1));
        assert_eq!(
            s("FB"),
            Some(1),
            "ranges are inclusive of everything starting with F"
        );
        assert_eq!(s("F"), Some(1));
        assert_eq!(s("GOOG"), Some(2));
        assert_eq!(s("MZZZ"), Some(2));
        assert_eq!(
            s("NVDA"),
            Some(3),
            "unclaimed symbols go to the default stream"
        );
        assert_eq!(s("ZVZZT"), Some(3));
    }

    #[test]
    fn stock_directory_fills_the_table_and_per_stock_messages_follow_it() {
        let (mut r, _) = router(LISTS);
        assert_eq!(r.route(&directory(7, "AAPL")), Route::Stream(0));
        assert_eq!(r.route(&directory(8, "GOOG")), Route::Stream(2));
        assert_eq!(r.route(&delete(7)), Route::Stream(0));
        assert_eq!(r.route(&delete(8)), Route::Stream(2));
        assert_eq!(r.stream_of_locate(7), Some(0));
        // Unknown locate without a symbol: the control stream.
        assert_eq!(r.route(&delete(9)), Route::Stream(4));
        // Unknown locate with a symbol: learnt from the message.
        assert_eq!(r.route(&add(9, "NVDA")), Route::Stream(3));
        assert_eq!(r.route(&delete(9)), Route::Stream(3));
        // A new directory entry for a locate moves it.
        assert_eq!(r.route(&directory(9, "AMZN")), Route::Stream(1));
        assert_eq!(r.route(&delete(9)), Route::Stream(1));
        r.clear();
        assert_eq!(r.route(&delete(7)), Route::Stream(4));
    }

    #[test]
    fn system_messages_go_everywhere_or_to_control() {
        let (mut r, _) = router(LISTS);
        assert_eq!(r.route(&system_event(0)), Route::All);
        assert_eq!(r.route(&delete(0)), Route::All, "locate 0 is market-wide");
        let (mut r, _) = router(&LISTS.replace(
            "control = \"ctl\"",
            "control = \"ctl\"\nsystem = \"control\"",
        ));
        assert_eq!(r.route(&system_event(0)), Route::Stream(4));
    }

    #[test]
    fn without_control_or_default_messages_are_dropped() {
        let (mut r, names) = router(
            r#"
[routing]
default = ""
[[routing.streams]]
name = "only"
symbols = ["AAPL"]
"#,
        );
        assert_eq!(names, ["only"]);
        assert_eq!(r.route(&delete(3)), Route::DropUnknown);
        assert_eq!(r.route(&directory(3, "MSFT")), Route::DropUnmatched);
        assert_eq!(r.route(&delete(3)), Route::DropUnmatched);
        assert_eq!(r.route(&directory(4, "AAPL")), Route::Stream(0));
        let (mut r, _) = router(&LISTS.replace(
            "default = \"rest\"",
            "default = \"rest\"\nunknown = \"drop\"",
        ));
        assert_eq!(r.route(&delete(3)), Route::DropUnknown);
    }

    #[test]
    fn hash_partitions_are_stable_and_cover_every_stream() {
        let (r, names) =
            router("[routing]\nmode = \"hash\"\nhash_streams = 4\nhash_prefix = \"p\"\n");
        assert_eq!(names, ["p-0", "p-1", "p-2", "p-3"]);
        let mut seen = [0u32; 4];
        for l in 1..=400u16 {
            let sym = format!("S{l:04}");
            let st = Stock::new(&sym).unwrap();
            let s = r.stream_of_symbol(&st).unwrap();
            assert_eq!(u64::from(s), symbol_hash(&st) % 4);
            seen[usize::from(s)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        // Stable: FNV-1a of the padded bytes, fixed here.
        assert_eq!(
            symbol_hash(&Stock::new("AAPL").unwrap()),
            0xe627_7f8d_5fc5_493b
        );
    }

    #[test]
    fn short_input_never_panics() {
        let (mut r, _) = router(LISTS);
        for msg in [&b""[..], b"A", b"A\x00", b"R\x00\x05"] {
            let _ = r.route(msg);
        }
    }
}
