//! The values the ITCH 5.0 specification lists for one-character code
//! fields. Code fields are kept as raw bytes (`u8`) so that decoding stays
//! lossless when a feed sends a value added after this list was written;
//! these constants name the values a reader or generator normally meets.

/// System Event codes.
pub mod event {
    /// Start of Messages: the first message of the day.
    pub const START_OF_MESSAGES: u8 = b'O';
    /// Start of System Hours: Nasdaq is open and accepting orders.
    pub const START_OF_SYSTEM_HOURS: u8 = b'S';
    /// Start of Market Hours.
    pub const START_OF_MARKET_HOURS: u8 = b'Q';
    /// End of Market Hours.
    pub const END_OF_MARKET_HOURS: u8 = b'M';
    /// End of System Hours.
    pub const END_OF_SYSTEM_HOURS: u8 = b'E';
    /// End of Messages: the last message of the day.
    pub const END_OF_MESSAGES: u8 = b'C';
}

/// Buy/sell indicator.
pub mod side {
    /// Buy order.
    pub const BUY: u8 = b'B';
    /// Sell order.
    pub const SELL: u8 = b'S';
}

/// Stock Directory market category (listing market).
pub mod market_category {
    /// Nasdaq Global Select Market.
    pub const NASDAQ_GLOBAL_SELECT: u8 = b'Q';
    /// Nasdaq Global Market.
    pub const NASDAQ_GLOBAL_MARKET: u8 = b'G';
    /// Nasdaq Capital Market.
    pub const NASDAQ_CAPITAL_MARKET: u8 = b'S';
    /// New York Stock Exchange.
    pub const NYSE: u8 = b'N';
    /// NYSE American.
    pub const NYSE_AMERICAN: u8 = b'A';
    /// NYSE Arca.
    pub const NYSE_ARCA: u8 = b'P';
    /// Cboe BZX.
    pub const BATS_Z: u8 = b'Z';
    /// Investors' Exchange.
    pub const IEX: u8 = b'V';
    /// Not available.
    pub const NOT_AVAILABLE: u8 = b' ';
}

/// Stock Directory financial status indicator.
pub mod financial_status {
    /// Normal: not deficient, delinquent or bankrupt.
    pub const NORMAL: u8 = b'N';
    /// Deficient.
    pub const DEFICIENT: u8 = b'D';
    /// Delinquent.
    pub const DELINQUENT: u8 = b'E';
    /// Bankrupt.
    pub const BANKRUPT: u8 = b'Q';
    /// Suspended.
    pub const SUSPENDED: u8 = b'S';
    /// Not available (e.g. not Nasdaq-listed).
    pub const NOT_AVAILABLE: u8 = b' ';
}

/// Stock Trading Action trading state.
pub mod trading_state {
    /// Halted across all U.S. equity markets.
    pub const HALTED: u8 = b'H';
    /// Paused across all U.S. equity markets (Nasdaq-listed only).
    pub const PAUSED: u8 = b'P';
    /// Quotation-only period.
    pub const QUOTATION_ONLY: u8 = b'Q';
    /// Trading on Nasdaq.
    pub const TRADING: u8 = b'T';
}

/// Reg SHO action.
pub mod reg_sho_action {
    /// No price test in place.
    pub const NONE: u8 = b'0';
    /// Restriction in effect due to an intraday price drop.
    pub const INTRADAY: u8 = b'1';
    /// Restriction remains in effect.
    pub const CONTINUED: u8 = b'2';
}

/// Cross types of Cross Trade and NOII messages.
pub mod cross_type {
    /// Nasdaq Opening Cross.
    pub const OPENING: u8 = b'O';
    /// Nasdaq Closing Cross.
    pub const CLOSING: u8 = b'C';
    /// Cross for an IPO or a halted or paused security.
    pub const IPO_OR_HALTED: u8 = b'H';
    /// Intraday cross and post-close cross (Cross Trade only).
    pub const INTRADAY: u8 = b'I';
    /// Extended trading close.
    pub const EXTENDED_TRADING_CLOSE: u8 = b'A';
}

/// NOII imbalance direction.
pub mod imbalance_direction {
    /// Buy imbalance.
    pub const BUY: u8 = b'B';
    /// Sell imbalance.
    pub const SELL: u8 = b'S';
    /// No imbalance.
    pub const NONE: u8 = b'N';
    /// Insufficient orders to calculate.
    pub const INSUFFICIENT_ORDERS: u8 = b'O';
    /// Paused.
    pub const PAUSED: u8 = b'P';
}

/// Yes/no flags (printable, round lots only, primary market maker, ...).
pub mod yes_no {
    /// Yes.
    pub const YES: u8 = b'Y';
    /// No.
    pub const NO: u8 = b'N';
    /// Not available, where the field allows it.
    pub const NOT_AVAILABLE: u8 = b' ';
}

/// Retail Price Improvement interest flag.
pub mod interest_flag {
    /// RPI orders available on the buy side.
    pub const BUY: u8 = b'B';
    /// RPI orders available on the sell side.
    pub const SELL: u8 = b'S';
    /// RPI orders available on both sides.
    pub const BOTH: u8 = b'A';
    /// No RPI orders available.
    pub const NONE: u8 = b'N';
}
