//! The session generator: a state machine walking through the trading day,
//! with an order pool that keeps the order flow consistent.

use super::rng::Rng;
use super::{SynthConfig, SynthError, TypeSet};
use crate::alpha::{Alpha, Stock};
use crate::itch::codes::{cross_type, event, imbalance_direction, side, trading_state, yes_no};
use crate::itch::{
    self, AddOrder, AddOrderMpid, BrokenTrade, CrossTrade, DirectListingCapitalRaise, Header,
    IpoQuotingPeriodUpdate, LuldAuctionCollar, MarketParticipantPosition, MwcbDeclineLevel,
    MwcbStatus, Noii, OperationalHalt, OrderCancel, OrderDelete, OrderExecuted,
    OrderExecutedWithPrice, OrderReplace, OwnedMessage, Price4, Price8, RegShoRestriction,
    RetailPriceImprovementIndicator, StockDirectory, StockTradingAction, SystemEvent, Timestamp,
    Trade, MAX_MESSAGE_LEN,
};

/// One encoded message and the time it is meant to be sent (its ITCH
/// timestamp). A plain value on the stack: producing one allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SynthMessage {
    timestamp: Timestamp,
    len: u8,
    buf: [u8; MAX_MESSAGE_LEN],
}

impl SynthMessage {
    /// The intended send time, equal to the message's timestamp field.
    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }

    /// The encoded ITCH message.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The message type byte.
    pub fn msg_type(&self) -> u8 {
        self.buf[0]
    }

    /// Decodes the message (always succeeds for generated messages).
    ///
    /// # Errors
    /// None in practice; the signature is [`itch::decode`]'s.
    pub fn decode(&self) -> Result<itch::Message<'_>, itch::DecodeError> {
        itch::decode(self.bytes())
    }
}

impl std::fmt::Debug for SynthMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            Ok(m) => std::fmt::Debug::fmt(&m, f),
            Err(e) => write!(f, "SynthMessage({e})"),
        }
    }
}

/// One cent in `Price(4)` units: the tick of the generated books.
const TICK: u32 = 100;
/// Start of Messages comes this long before the open.
const PRE_OPEN_NS: u64 = 30 * 60 * 1_000_000_000;
/// Start of System Hours, relative to Start of Messages.
const SYSTEM_HOURS_AFTER_NS: u64 = 5 * 60 * 1_000_000_000;
/// Opening imbalance indications start this long before the open.
const OPENING_NOII_BEFORE_NS: u64 = 5 * 60 * 1_000_000_000;
/// Closing imbalance indications start this long before the close.
const CLOSING_NOII_BEFORE_NS: u64 = 10 * 60 * 1_000_000_000;
/// Orders are added without choice until the pool holds this many.
const MIN_LIVE: usize = 32;
/// Mean number of messages in a burst after the one that starts it.
const MEAN_BURST: f64 = 6.0;
/// Firms attributed on Add Order MPID messages.
const MPIDS: [[u8; 4]; 6] = [*b"NSDQ", *b"GSCO", *b"MSCO", *b"UBSS", *b"CDRG", *b"VIRT"];

/// What the continuous-trading phase does next, with weights per 1,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    AddMpid,
    Delete,
    Cancel,
    Execute,
    ExecuteWithPrice,
    Replace,
    Trade,
    Admin,
}

const OP_WEIGHTS: [(Op, u64); 9] = [
    (Op::Add, 380),
    (Op::AddMpid, 25),
    (Op::Delete, 310),
    (Op::Cancel, 60),
    (Op::Execute, 85),
    (Op::ExecuteWithPrice, 8),
    (Op::Replace, 100),
    (Op::Trade, 25),
    (Op::Admin, 7),
];

/// The occasional administrative messages of continuous trading.
const ADMIN_TYPES: [u8; 11] = [
    b'H', b'Y', b'L', b'W', b'K', b'J', b'h', b'N', b'O', b'I', b'B',
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    StartOfMessages,
    Directory(u16),
    StartOfSystemHours,
    TradingState(u16),
    DeclineLevels,
    OpeningImbalance(u16),
    StartOfMarketHours,
    OpeningCross(u16),
    Continuous,
    Resumes,
    ClosingImbalance(u16),
    ClosingCross(u16),
    EndOfMarketHours,
    EndOfSystemHours,
    EndOfMessages,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct LiveOrder {
    reference: u64,
    locate: u16,
    side: u8,
    shares: u32,
    price: u32,
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    stock: Stock,
    // Mid price in Price(4) units, a whole number of ticks.
    mid: u32,
    halted: bool,
}

/// A halt that ends after a number of continuous-trading messages.
#[derive(Debug, Clone, Copy)]
struct Resume {
    locate: u16,
    due: u64,
    operational: bool,
}

/// Generates a synthetic ITCH 5.0 session; see the [module docs](super).
///
/// An `Iterator` of [`SynthMessage`]: all state is allocated in
/// [`Generator::new`], and producing a message allocates nothing.
#[derive(Clone)]
pub struct Generator {
    rng: Rng,
    phase: Phase,
    now: u64,
    open: u64,
    close: u64,
    symbols: Vec<Symbol>,
    // Allocated with room for `max_live` orders and never grown.
    orders: Vec<LiveOrder>,
    max_live: usize,
    resumes: Vec<Resume>,
    halted: usize,
    next_reference: u64,
    next_match: u64,
    flow_target: u64,
    flow_emitted: u64,
    // Arrival model: nanoseconds of mean gap late in the day, the open's
    // surge and its decay time.
    base_gap_ns: f64,
    surge: f64,
    decay_ns: f64,
    burst_probability: f64,
    burst_left: u32,
    op_table: [(Op, u64); 9],
    op_total: u64,
    admin: [u8; ADMIN_TYPES.len()],
    admin_len: usize,
    disabled: TypeSet,
    counts: [u64; 128],
}

impl Generator {
    /// Prepares a session: checks the config and allocates the symbol
    /// table, the order pool and the halt list.
    ///
    /// # Errors
    /// The config is unusable; the error says which field and why.
    pub fn new(config: &SynthConfig) -> Result<Self, SynthError> {
        if config.symbols == 0 {
            return Err(SynthError::NoSymbols);
        }
        if config.max_live_orders == 0 {
            return Err(SynthError::NoOrderPool);
        }
        let Some(start) = config.open.nanos().checked_sub(PRE_OPEN_NS) else {
            return Err(SynthError::OpenTooEarly { open: config.open });
        };
        if config.close <= config.open {
            return Err(SynthError::CloseBeforeOpen {
                open: config.open,
                close: config.close,
            });
        }
        if !(config.open_surge.is_finite() && config.open_surge >= 0.0) {
            return Err(SynthError::BadParameter {
                field: "open_surge",
                requirement: "finite and not negative",
                value: config.open_surge,
            });
        }
        if !(0.0..1.0).contains(&config.burst_probability) {
            return Err(SynthError::BadParameter {
                field: "burst_probability",
                requirement: "in [0, 1)",
                value: config.burst_probability,
            });
        }
        if !config.disabled.is_subset(TypeSet::OPTIONAL) {
            let mut required = TypeSet::EMPTY;
            for t in config.disabled.iter() {
                if !TypeSet::OPTIONAL.contains(t) {
                    required = required.with(t);
                }
            }
            return Err(SynthError::RequiredTypeDisabled {
                types: required,
                optional: TypeSet::OPTIONAL,
            });
        }

        let mut rng = Rng::new(config.seed);
        let symbols = (1..=config.symbols)
            .map(|locate| Symbol {
                stock: ticker(locate),
                // $5.00 to $500.00 in whole cents.
                mid: u32::try_from(rng.range(500, 50_000)).unwrap_or(10_000) * TICK,
                halted: false,
            })
            .collect();

        // Calibrate the late-day gap so that the expected arrivals of the
        // rate shape 1 + surge / (1 + t / decay)^2 over the session match
        // the messages asked for. Burst messages take almost no time, so
        // only the messages outside bursts spread over the day.
        let session = (config.close.nanos() - config.open.nanos()) as f64;
        let decay = session / 26.0;
        let surge = config.open_surge;
        let weight = session + surge * decay * session / (session + decay);
        let burst_share =
            config.burst_probability * MEAN_BURST / (1.0 + config.burst_probability * MEAN_BURST);
        let spread = (config.order_messages as f64 * (1.0 - burst_share)).max(1.0);

        let disabled = config.disabled;
        let mut op_table = OP_WEIGHTS;
        for (op, w) in &mut op_table {
            let t = match op {
                Op::AddMpid => b'F',
                Op::ExecuteWithPrice => b'C',
                Op::Trade => b'P',
                _ => continue,
            };
            if disabled.contains(t) {
                *w = 0;
            }
        }
        let mut admin = [0; ADMIN_TYPES.len()];
        let mut admin_len = 0;
        for t in ADMIN_TYPES {
            if !disabled.contains(t) {
                admin[admin_len] = t;
                admin_len += 1;
            }
        }
        if admin_len == 0 {
            for (op, w) in &mut op_table {
                if *op == Op::Admin {
                    *w = 0;
                }
            }
        }
        let op_total = op_table.iter().map(|(_, w)| w).sum();

        Ok(Self {
            rng,
            phase: Phase::StartOfMessages,
            now: start,
            open: config.open.nanos(),
            close: config.close.nanos(),
            symbols,
            orders: Vec::with_capacity(config.max_live_orders),
            max_live: config.max_live_orders,
            resumes: Vec::with_capacity(usize::from(config.symbols)),
            halted: 0,
            next_reference: 1,
            next_match: 1,
            flow_target: config.order_messages,
            flow_emitted: 0,
            base_gap_ns: weight / spread,
            surge,
            decay_ns: decay,
            burst_probability: config.burst_probability,
            burst_left: 0,
            op_table,
            op_total,
            admin,
            admin_len,
            disabled,
            counts: [0; 128],
        })
    }

    /// Messages of type `t` produced so far.
    pub fn emitted(&self, t: u8) -> u64 {
        self.counts.get(usize::from(t)).copied().unwrap_or(0)
    }

    /// Orders resting now.
    pub fn live_orders(&self) -> usize {
        self.orders.len()
    }

    /// The symbol of a locate code (`1..=symbols`).
    pub fn symbol(&self, locate: u16) -> Option<Stock> {
        let i = usize::from(locate).checked_sub(1)?;
        self.symbols.get(i).map(|s| s.stock)
    }

    fn enabled(&self, t: u8) -> bool {
        !self.disabled.contains(t)
    }

    fn symbol_count(&self) -> u16 {
        // The table was built from a u16 count.
        u16::try_from(self.symbols.len()).unwrap_or(u16::MAX)
    }

    fn stock(&self, locate: u16) -> Stock {
        self.symbol(locate).unwrap_or(Stock::BLANK)
    }

    fn sym_mut(&mut self, locate: u16) -> Option<&mut Symbol> {
        let i = usize::from(locate).checked_sub(1)?;
        self.symbols.get_mut(i)
    }

    fn mid(&self, locate: u16) -> u32 {
        usize::from(locate)
            .checked_sub(1)
            .and_then(|i| self.symbols.get(i))
            .map_or(10_000 * TICK, |s| s.mid)
    }

    fn is_halted(&self, locate: u16) -> bool {
        usize::from(locate)
            .checked_sub(1)
            .and_then(|i| self.symbols.get(i))
            .is_some_and(|s| s.halted)
    }

    fn header(&self, locate: u16) -> Header {
        Header {
            stock_locate: locate,
            // Nasdaq's tracking number is internal; a small value derived
            // from the locate looks like a real feed's.
            tracking_number: locate % 4,
            timestamp: Timestamp::new(self.now).unwrap_or(Timestamp::MAX),
        }
    }

    /// Moves the clock to at least `at`, and at least `step` forward.
    fn advance_to(&mut self, at: u64, step: u64) {
        self.now = (self.now + step).max(at);
    }

    /// Moves the clock by one arrival gap of continuous trading.
    fn advance_arrival(&mut self) {
        if self.burst_left > 0 {
            self.burst_left -= 1;
            self.now += self.rng.range(20, 2_000);
            return;
        }
        let x = self.now.saturating_sub(self.open) as f64 / self.decay_ns;
        let rate = 1.0 + self.surge / ((1.0 + x) * (1.0 + x));
        let gap = self.rng.exp1() * self.base_gap_ns / rate;
        // Gaps are far below 2^53 ns; the cast truncates toward zero.
        self.now += gap as u64;
        if self.rng.chance(self.burst_probability) {
            let mut n = 1;
            while n < 64 && self.rng.chance(1.0 - 1.0 / MEAN_BURST) {
                n += 1;
            }
            self.burst_left = n;
        }
    }

    fn emit(&mut self, msg: impl Into<OwnedMessage>) -> SynthMessage {
        let msg = msg.into();
        let mut buf = [0; MAX_MESSAGE_LEN];
        // Every message fits in MAX_MESSAGE_LEN, so encoding cannot fail.
        let len = msg.encode(&mut buf).unwrap_or(0);
        if let Some(c) = self.counts.get_mut(usize::from(msg.msg_type())) {
            *c += 1;
        }
        SynthMessage {
            timestamp: msg.header().timestamp,
            len: u8::try_from(len).unwrap_or(0),
            buf,
        }
    }

    fn system_event(&mut self, code: u8) -> SynthMessage {
        let m = SystemEvent {
            header: self.header(0),
            event_code: code,
        };
        self.emit(m)
    }

    fn pick_locate(&mut self) -> u16 {
        // Squaring a uniform skews activity toward low locates, so a few
        // symbols are busy and most are quiet, as on a real feed.
        let u = self.rng.unit();
        let n = f64::from(self.symbol_count());
        let i = ((u * u * n) as u16).min(self.symbol_count() - 1);
        i + 1
    }

    fn pick_trading_locate(&mut self) -> Option<u16> {
        for _ in 0..8 {
            let l = self.pick_locate();
            if !self.is_halted(l) {
                return Some(l);
            }
        }
        (1..=self.symbol_count()).find(|&l| !self.is_halted(l))
    }

    /// The side, size and price of a new order or trade in `locate`, near
    /// its mid (drawn in this order: the output is deterministic per seed).
    fn pick_order(&mut self, locate: u16) -> (u8, u32, u32) {
        let side = if self.rng.chance(0.5) {
            side::BUY
        } else {
            side::SELL
        };
        let shares = self.pick_shares();
        let price = self.price_near(self.mid(locate), side);
        (side, shares, price)
    }

    /// `Y` with probability `p`, `N` otherwise.
    fn yes_with(&mut self, p: f64) -> u8 {
        if self.rng.chance(p) {
            yes_no::YES
        } else {
            yes_no::NO
        }
    }

    fn pick_shares(&mut self) -> u32 {
        if self.rng.chance(0.1) {
            // Odd lot.
            self.rng.range(1, 99) as u32
        } else {
            self.rng.range(1, 10) as u32 * 100
        }
    }

    fn price_near(&mut self, mid: u32, side: u8) -> u32 {
        let ticks = self.rng.below(8) as u32 * TICK;
        if side == side::BUY {
            mid.saturating_sub(ticks).max(TICK)
        } else {
            mid.saturating_add(ticks)
        }
    }

    fn drift(&mut self, locate: u16) {
        if self.rng.chance(0.3) {
            let up = self.rng.chance(0.5);
            if let Some(s) = self.sym_mut(locate) {
                s.mid = if up {
                    s.mid.saturating_add(TICK)
                } else {
                    s.mid.saturating_sub(TICK).max(100 * TICK)
                };
            }
        }
    }

    fn random_order(&mut self) -> Option<usize> {
        if self.orders.is_empty() {
            None
        } else {
            Some(self.rng.below(self.orders.len() as u64) as usize)
        }
    }

    fn next_match_number(&mut self) -> u64 {
        let m = self.next_match;
        self.next_match += 1;
        m
    }

    // ---- the phases before continuous trading ----

    fn stock_directory(&mut self, locate: u16) -> SynthMessage {
        let category = [b'Q', b'G', b'S', b'N', b'P'][self.rng.below(5) as usize];
        let nasdaq_listed = matches!(category, b'Q' | b'G' | b'S');
        let tier = if self.rng.chance(0.3) { b'1' } else { b'2' };
        let m = StockDirectory {
            header: self.header(locate),
            stock: self.stock(locate),
            market_category: category,
            financial_status_indicator: if nasdaq_listed { b'N' } else { b' ' },
            round_lot_size: 100,
            round_lots_only: yes_no::NO,
            issue_classification: b'C',
            issue_sub_type: Alpha(*b"Z "),
            authenticity: b'P',
            short_sale_threshold_indicator: yes_no::NO,
            ipo_flag: yes_no::NO,
            luld_reference_price_tier: tier,
            etp_flag: yes_no::NO,
            etp_leverage_factor: 0,
            inverse_indicator: yes_no::NO,
        };
        self.emit(m)
    }

    fn trading_action(&mut self, locate: u16, state: u8, reason: [u8; 4]) -> SynthMessage {
        let m = StockTradingAction {
            header: self.header(locate),
            stock: self.stock(locate),
            trading_state: state,
            reserved: b' ',
            reason: Alpha(reason),
        };
        self.emit(m)
    }

    fn noii(&mut self, locate: u16, cross: u8) -> SynthMessage {
        let mid = self.mid(locate);
        let paired = self.rng.range(0, 50) * 100;
        let imbalance = self.rng.range(0, 20) * 100;
        let direction = if imbalance == 0 {
            imbalance_direction::NONE
        } else if self.rng.chance(0.5) {
            imbalance_direction::BUY
        } else {
            imbalance_direction::SELL
        };
        let near = self.price_near(mid, side::BUY);
        let m = Noii {
            header: self.header(locate),
            paired_shares: paired,
            imbalance_shares: imbalance,
            imbalance_direction: direction,
            stock: self.stock(locate),
            far_price: Price4(self.price_near(mid, side::SELL)),
            near_price: Price4(near),
            current_reference_price: Price4(mid),
            cross_type: cross,
            price_variation_indicator: b"L123456789ABC "[self.rng.below(14) as usize],
        };
        self.emit(m)
    }

    fn cross(&mut self, locate: u16, cross: u8) -> SynthMessage {
        let shares = self.rng.range(1, 500) * 100;
        let match_number = self.next_match_number();
        let m = CrossTrade {
            header: self.header(locate),
            shares,
            stock: self.stock(locate),
            cross_price: Price4(self.mid(locate)),
            match_number,
            cross_type: cross,
        };
        self.emit(m)
    }

    // ---- continuous trading ----

    fn choose_op(&mut self) -> Op {
        if self.orders.len() < MIN_LIVE.min(self.max_live) {
            return Op::Add;
        }
        let mut pick = self.rng.below(self.op_total);
        for (op, w) in self.op_table {
            if pick < w {
                return op;
            }
            pick -= w;
        }
        Op::Add
    }

    fn flow_message(&mut self) -> SynthMessage {
        self.advance_arrival();
        if let Some(i) = self.resumes.iter().position(|r| r.due <= self.flow_emitted) {
            let r = self.resumes.swap_remove(i);
            return self.resume(r);
        }
        let op = self.choose_op();
        match op {
            Op::Add | Op::AddMpid => {
                if self.orders.len() >= self.max_live {
                    self.delete_or_add()
                } else {
                    self.add(op == Op::AddMpid)
                }
            }
            Op::Delete => self.delete_or_add(),
            Op::Cancel => self.cancel(),
            Op::Execute | Op::ExecuteWithPrice => self.execute(op == Op::ExecuteWithPrice),
            Op::Replace => self.replace(),
            Op::Trade => self.trade(),
            Op::Admin => self.admin_message(),
        }
    }

    fn add(&mut self, attributed: bool) -> SynthMessage {
        let Some(locate) = self.pick_trading_locate() else {
            return self.delete_or_system_event();
        };
        let (side, shares, price) = self.pick_order(locate);
        let reference = self.next_reference;
        self.next_reference += 1;
        self.orders.push(LiveOrder {
            reference,
            locate,
            side,
            shares,
            price,
        });
        let header = self.header(locate);
        let stock = self.stock(locate);
        if attributed {
            let attribution = Alpha(MPIDS[self.rng.below(MPIDS.len() as u64) as usize]);
            self.emit(AddOrderMpid {
                header,
                order_reference_number: reference,
                buy_sell_indicator: side,
                shares,
                stock,
                price: Price4(price),
                attribution,
            })
        } else {
            self.emit(AddOrder {
                header,
                order_reference_number: reference,
                buy_sell_indicator: side,
                shares,
                stock,
                price: Price4(price),
            })
        }
    }

    fn delete_or_add(&mut self) -> SynthMessage {
        match self.random_order() {
            Some(i) => self.delete(i),
            None => self.add(false),
        }
    }

    fn delete_or_system_event(&mut self) -> SynthMessage {
        match self.random_order() {
            Some(i) => self.delete(i),
            // Every symbol halted and no order resting: cannot happen with
            // the halt limit, but a harmless message keeps the count right.
            None => self.system_event(event::START_OF_MARKET_HOURS),
        }
    }

    fn delete(&mut self, i: usize) -> SynthMessage {
        let o = self.orders.swap_remove(i);
        let m = OrderDelete {
            header: self.header(o.locate),
            order_reference_number: o.reference,
        };
        self.emit(m)
    }

    fn cancel(&mut self) -> SynthMessage {
        let Some(i) = self.random_order() else {
            return self.add(false);
        };
        let o = self.orders[i];
        if o.shares < 2 {
            return self.delete(i);
        }
        // A partial cancel: the order keeps at least one share.
        let cancelled = self.rng.range(1, u64::from(o.shares) - 1) as u32;
        self.orders[i].shares -= cancelled;
        let m = OrderCancel {
            header: self.header(o.locate),
            order_reference_number: o.reference,
            cancelled_shares: cancelled,
        };
        self.emit(m)
    }

    fn execute(&mut self, with_price: bool) -> SynthMessage {
        let Some(i) = self.random_order() else {
            return self.add(false);
        };
        let o = self.orders[i];
        if self.is_halted(o.locate) {
            // No executions during a halt; cancels and deletes go on.
            return self.delete(i);
        }
        let executed = if o.shares == 1 || self.rng.chance(0.5) {
            o.shares
        } else {
            self.rng.range(1, u64::from(o.shares) - 1) as u32
        };
        if executed == o.shares {
            self.orders.swap_remove(i);
        } else {
            self.orders[i].shares -= executed;
        }
        let match_number = self.next_match_number();
        let header = self.header(o.locate);
        self.drift(o.locate);
        if with_price {
            let price = if self.rng.chance(0.5) {
                o.price.saturating_add(TICK)
            } else {
                o.price.saturating_sub(TICK).max(TICK)
            };
            let printable = self.yes_with(0.8);
            self.emit(OrderExecutedWithPrice {
                header,
                order_reference_number: o.reference,
                executed_shares: executed,
                match_number,
                printable,
                execution_price: Price4(price),
            })
        } else {
            self.emit(OrderExecuted {
                header,
                order_reference_number: o.reference,
                executed_shares: executed,
                match_number,
            })
        }
    }

    fn replace(&mut self) -> SynthMessage {
        let Some(i) = self.random_order() else {
            return self.add(false);
        };
        let o = self.orders[i];
        let reference = self.next_reference;
        self.next_reference += 1;
        let shares = self.pick_shares();
        let price = self.price_near(self.mid(o.locate), o.side);
        self.orders[i] = LiveOrder {
            reference,
            shares,
            price,
            ..o
        };
        let m = OrderReplace {
            header: self.header(o.locate),
            original_order_reference_number: o.reference,
            new_order_reference_number: reference,
            shares,
            price: Price4(price),
        };
        self.emit(m)
    }

    fn trade(&mut self) -> SynthMessage {
        let Some(locate) = self.pick_trading_locate() else {
            return self.delete_or_system_event();
        };
        let (side, shares, price) = self.pick_order(locate);
        let match_number = self.next_match_number();
        let header = self.header(locate);
        self.drift(locate);
        self.emit(Trade {
            header,
            // Nasdaq sends 0 here: the non-displayed order is not identified.
            order_reference_number: 0,
            buy_sell_indicator: side,
            shares,
            stock: self.stock(locate),
            price: Price4(price),
            match_number,
        })
    }

    fn admin_message(&mut self) -> SynthMessage {
        let t = self.admin[self.rng.below(self.admin_len as u64) as usize];
        let locate = self.pick_locate();
        let header = self.header(locate);
        let stock = self.stock(locate);
        let mid = self.mid(locate);
        match t {
            b'H' => self.halt(locate, false),
            b'h' => self.halt(locate, true),
            b'Y' => {
                let action = b"012"[self.rng.below(3) as usize];
                self.emit(RegShoRestriction {
                    header,
                    stock,
                    reg_sho_action: action,
                })
            }
            b'L' => {
                let mpid = Alpha(MPIDS[self.rng.below(MPIDS.len() as u64) as usize]);
                let primary = self.yes_with(0.2);
                let mode = b"NPSRL"[self.rng.below(5) as usize];
                let state = b"AEWSD"[self.rng.below(5) as usize];
                self.emit(MarketParticipantPosition {
                    header,
                    mpid,
                    stock,
                    primary_market_maker: primary,
                    market_maker_mode: mode,
                    market_participant_state: state,
                })
            }
            b'W' => {
                let level = b"123"[self.rng.below(3) as usize];
                let m = MwcbStatus {
                    header: self.header(0),
                    breached_level: level,
                };
                self.emit(m)
            }
            b'K' => {
                let release = u32::try_from(self.close / 1_000_000_000).unwrap_or(0);
                let qualifier = if self.rng.chance(0.9) { b'A' } else { b'C' };
                self.emit(IpoQuotingPeriodUpdate {
                    header,
                    stock,
                    ipo_quotation_release_time: release,
                    ipo_quotation_release_qualifier: qualifier,
                    ipo_price: Price4(mid),
                })
            }
            b'J' => {
                let extension = self.rng.below(4) as u32;
                self.emit(LuldAuctionCollar {
                    header,
                    stock,
                    auction_collar_reference_price: Price4(mid),
                    upper_auction_collar_price: Price4(mid.saturating_add(mid / 20)),
                    lower_auction_collar_price: Price4(mid - mid / 20),
                    auction_collar_extension: extension,
                })
            }
            b'N' => {
                let flag = b"BSAN"[self.rng.below(4) as usize];
                self.emit(RetailPriceImprovementIndicator {
                    header,
                    stock,
                    interest_flag: flag,
                })
            }
            b'O' => {
                let eligible = self.yes_with(0.5);
                self.emit(DirectListingCapitalRaise {
                    header,
                    stock,
                    open_eligibility_status: eligible,
                    minimum_allowable_price: Price4(mid - mid / 5),
                    maximum_allowable_price: Price4(mid.saturating_add(mid / 5 * 4)),
                    near_execution_price: Price4(mid),
                    near_execution_time: self.now,
                    lower_price_range_collar: Price4(mid - mid / 10),
                    upper_price_range_collar: Price4(mid.saturating_add(mid / 10)),
                })
            }
            b'I' => self.noii(locate, cross_type::IPO_OR_HALTED),
            b'B' if self.next_match > 1 => {
                let broken = self.rng.range(1, self.next_match - 1);
                let m = BrokenTrade {
                    header,
                    match_number: broken,
                };
                self.emit(m)
            }
            _ => self.delete_or_add(),
        }
    }

    fn halt(&mut self, locate: u16, operational: bool) -> SynthMessage {
        // At most half the symbols halted at once, and one halt per symbol.
        if self.is_halted(locate) || 2 * (self.halted + 1) > self.symbols.len() {
            return self.delete_or_add();
        }
        if let Some(s) = self.sym_mut(locate) {
            s.halted = true;
        }
        self.halted += 1;
        let due = self.flow_emitted + self.rng.range(50, 2_000);
        self.resumes.push(Resume {
            locate,
            due,
            operational,
        });
        if operational {
            let m = OperationalHalt {
                header: self.header(locate),
                stock: self.stock(locate),
                market_code: b"QBX"[self.rng.below(3) as usize],
                operational_halt_action: b'H',
            };
            self.emit(m)
        } else {
            self.trading_action(locate, trading_state::HALTED, *b"T1  ")
        }
    }

    fn resume(&mut self, r: Resume) -> SynthMessage {
        if let Some(s) = self.sym_mut(r.locate) {
            s.halted = false;
        }
        self.halted -= 1;
        if r.operational {
            let m = OperationalHalt {
                header: self.header(r.locate),
                stock: self.stock(r.locate),
                market_code: b'Q',
                operational_halt_action: b'T',
            };
            self.emit(m)
        } else {
            self.trading_action(r.locate, trading_state::TRADING, *b"    ")
        }
    }

    /// The phase after `p` once its last symbol is done.
    fn after(&self, p: Phase) -> Phase {
        let q = match p {
            Phase::StartOfMessages => Phase::Directory(1),
            Phase::Directory(_) => Phase::StartOfSystemHours,
            Phase::StartOfSystemHours => Phase::TradingState(1),
            Phase::TradingState(_) => Phase::DeclineLevels,
            Phase::DeclineLevels => Phase::OpeningImbalance(1),
            Phase::OpeningImbalance(_) => Phase::StartOfMarketHours,
            Phase::StartOfMarketHours => Phase::OpeningCross(1),
            Phase::OpeningCross(_) => Phase::Continuous,
            Phase::Continuous => Phase::Resumes,
            Phase::Resumes => Phase::ClosingImbalance(1),
            Phase::ClosingImbalance(_) => Phase::ClosingCross(1),
            Phase::ClosingCross(_) => Phase::EndOfMarketHours,
            Phase::EndOfMarketHours => Phase::EndOfSystemHours,
            Phase::EndOfSystemHours => Phase::EndOfMessages,
            Phase::EndOfMessages | Phase::Done => Phase::Done,
        };
        // Skip phases whose messages are disabled.
        match q {
            Phase::DeclineLevels if !self.enabled(b'V') => self.after(q),
            Phase::OpeningImbalance(_) | Phase::ClosingImbalance(_) if !self.enabled(b'I') => {
                self.after(q)
            }
            Phase::OpeningCross(_) | Phase::ClosingCross(_) if !self.enabled(b'Q') => self.after(q),
            Phase::TradingState(_) if !self.enabled(b'H') => self.after(q),
            Phase::Continuous if self.flow_target == 0 => self.after(q),
            Phase::Resumes if self.resumes.is_empty() => self.after(q),
            _ => q,
        }
    }

    /// Per-symbol phases move to the next locate, or on after the last.
    fn next_symbol(&self, p: Phase, locate: u16) -> Phase {
        if locate >= self.symbol_count() {
            return self.after(p);
        }
        match p {
            Phase::Directory(_) => Phase::Directory(locate + 1),
            Phase::TradingState(_) => Phase::TradingState(locate + 1),
            Phase::OpeningImbalance(_) => Phase::OpeningImbalance(locate + 1),
            Phase::OpeningCross(_) => Phase::OpeningCross(locate + 1),
            Phase::ClosingImbalance(_) => Phase::ClosingImbalance(locate + 1),
            Phase::ClosingCross(_) => Phase::ClosingCross(locate + 1),
            other => self.after(other),
        }
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("phase", &self.phase)
            .field("now", &Timestamp::new(self.now))
            .field("symbols", &self.symbols.len())
            .field("live_orders", &self.orders.len())
            .field("flow_emitted", &self.flow_emitted)
            .finish_non_exhaustive()
    }
}

impl Iterator for Generator {
    type Item = SynthMessage;

    fn next(&mut self) -> Option<SynthMessage> {
        let phase = self.phase;
        let msg = match phase {
            Phase::Done => return None,
            Phase::StartOfMessages => {
                self.phase = self.after(phase);
                self.system_event(event::START_OF_MESSAGES)
            }
            Phase::Directory(l) => {
                self.advance_to(0, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.stock_directory(l)
            }
            Phase::StartOfSystemHours => {
                let at = self.open - PRE_OPEN_NS + SYSTEM_HOURS_AFTER_NS;
                self.advance_to(at, 1_000);
                self.phase = self.after(phase);
                self.system_event(event::START_OF_SYSTEM_HOURS)
            }
            Phase::TradingState(l) => {
                self.advance_to(0, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.trading_action(l, trading_state::TRADING, *b"    ")
            }
            Phase::DeclineLevels => {
                self.advance_to(0, 1_000);
                self.phase = self.after(phase);
                let m = MwcbDeclineLevel {
                    header: self.header(0),
                    level1: Price8(3_726_410_000_000),
                    level2: Price8(3_486_320_000_000),
                    level3: Price8(3_046_210_000_000),
                };
                self.emit(m)
            }
            Phase::OpeningImbalance(l) => {
                self.advance_to(self.open - OPENING_NOII_BEFORE_NS, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.noii(l, cross_type::OPENING)
            }
            Phase::StartOfMarketHours => {
                self.advance_to(self.open, 1);
                self.phase = self.after(phase);
                self.system_event(event::START_OF_MARKET_HOURS)
            }
            Phase::OpeningCross(l) => {
                self.advance_to(0, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.cross(l, cross_type::OPENING)
            }
            Phase::Continuous => {
                let m = self.flow_message();
                self.flow_emitted += 1;
                if self.flow_emitted >= self.flow_target {
                    self.phase = self.after(phase);
                }
                m
            }
            Phase::Resumes => {
                self.advance_to(0, 1_000);
                let r = self.resumes.swap_remove(0);
                if self.resumes.is_empty() {
                    self.phase = self.after(phase);
                }
                self.resume(r)
            }
            Phase::ClosingImbalance(l) => {
                self.advance_to(self.close - CLOSING_NOII_BEFORE_NS, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.noii(l, cross_type::CLOSING)
            }
            Phase::ClosingCross(l) => {
                self.advance_to(self.close, 1_000);
                self.phase = self.next_symbol(phase, l);
                self.cross(l, cross_type::CLOSING)
            }
            Phase::EndOfMarketHours => {
                self.advance_to(self.close, 1_000);
                self.phase = self.after(phase);
                self.system_event(event::END_OF_MARKET_HOURS)
            }
            Phase::EndOfSystemHours => {
                self.advance_to(0, 1_000_000);
                self.phase = self.after(phase);
                self.system_event(event::END_OF_SYSTEM_HOURS)
            }
            Phase::EndOfMessages => {
                self.advance_to(0, 1_000_000);
                self.phase = self.after(phase);
                self.system_event(event::END_OF_MESSAGES)
            }
        };
        Some(msg)
    }
}

/// A four-letter symbol for a locate code: `AAAA`, `AAAB`, ... in base 26.
fn ticker(locate: u16) -> Stock {
    let mut n = u32::from(locate).saturating_sub(1);
    let mut s = [b' '; 8];
    for i in (0..4).rev() {
        s[i] = b'A' + (n % 26) as u8;
        n /= 26;
    }
    Alpha(s)
}
