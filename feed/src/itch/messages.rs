//! Every ITCH 5.0 message type, generated from one layout table that follows
//! section 4 ("Message Formats") of the Nasdaq TotalView-ITCH 5.0
//! specification.
//!
//! For each message the table gives the type byte, the total length and
//! each field's offset as printed in the specification; field widths follow
//! from the field types. A compile-time check proves the offsets tile the
//! message from byte 11 to its last byte with no gap or overlap, so a typo
//! in the table fails the build instead of mis-decoding a feed.

use super::fields::{Field, Header, Price4, Price8, Timestamp};
use super::{DecodeError, EncodeError, FieldValue, HEADER_LEN};
use crate::alpha::{Alpha, Mpid, Stock};

/// Name, offset and width of one field of a message layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// Field name (the Rust field and accessor name).
    pub name: &'static str,
    /// Byte offset from the start of the message (the type byte is offset 0).
    pub offset: usize,
    /// Width in bytes.
    pub len: usize,
}

/// One row of the message type table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageType {
    /// The type byte.
    pub type_byte: u8,
    /// Length in bytes, type byte included.
    pub len: usize,
    /// The Rust name of the owned message struct.
    pub name: &'static str,
    /// The body fields after the common header.
    pub fields: &'static [FieldLayout],
}

macro_rules! itch_messages {
    (
        $(
            $(#[doc = $doc:literal])*
            $variant:ident($view:ident) = $tag:literal, $len:literal {
                $(
                    $(#[doc = $fdoc:literal])*
                    $field:ident: $fty:ty = $off:literal,
                )*
            }
        )+
    ) => {
        $(
            $(#[doc = $doc])*
            ///
            /// The owned form, with every field decoded: build one to encode
            /// it, or get one from a view with `decode()`.
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
            pub struct $variant {
                /// Stock locate, tracking number and timestamp (offsets 1-10).
                pub header: Header,
                $(
                    $(#[doc = $fdoc])*
                    pub $field: $fty,
                )*
            }

            // The layout check: offsets copied from the specification must
            // follow each other exactly and end at the specified length.
            const _: () = {
                let mut end = HEADER_LEN;
                $(
                    assert!(
                        $off == end,
                        concat!(stringify!($variant), ".", stringify!($field),
                                " does not start where the previous field ends")
                    );
                    end += <$fty as Field>::SIZE;
                )*
                assert!(end == $len, concat!(stringify!($variant),
                        ": fields do not end at the specified length"));
            };

            impl $variant {
                /// The message type byte.
                pub const TYPE: u8 = $tag;
                /// Length in bytes, type byte included, as specified.
                pub const LEN: usize = $len;
                /// The body fields after the common header, in wire order.
                pub const FIELDS: &'static [FieldLayout] = &[
                    $(FieldLayout {
                        name: stringify!($field),
                        offset: $off,
                        len: <$fty as Field>::SIZE,
                    },)*
                ];

                /// Encodes into the start of `out`, returning the bytes
                /// written (always [`Self::LEN`]).
                ///
                /// # Errors
                /// `out` is shorter than [`Self::LEN`].
                pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
                    let available = out.len();
                    let Some(out) = out.get_mut(..$len) else {
                        return Err(EncodeError::BufferTooSmall {
                            msg_type: $tag,
                            needed: $len,
                            available,
                        });
                    };
                    out[0] = $tag;
                    self.header.write(out);
                    $( Field::write(self.$field, &mut out[$off..$off + <$fty as Field>::SIZE]); )*
                    Ok($len)
                }

                /// Decodes one message of exactly [`Self::LEN`] bytes.
                ///
                /// # Errors
                /// Wrong type byte or wrong length.
                pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
                    $view::new(bytes).map(|v| v.decode())
                }
            }

            #[doc = concat!("Zero-copy view of a [`", stringify!($variant),
                            "`] message: a borrowed, length-checked `&[u8; ",
                            stringify!($len), "]` whose accessors decode one field each on demand.")]
            #[derive(Clone, Copy, PartialEq, Eq, Hash)]
            pub struct $view<'a> {
                raw: &'a [u8; $len],
            }

            impl<'a> $view<'a> {
                /// Checks the type byte and length, then borrows the bytes.
                ///
                /// # Errors
                /// Empty input, another type byte, or a length other than
                #[doc = concat!("[`", stringify!($variant), "::LEN`].")]
                pub fn new(bytes: &'a [u8]) -> Result<Self, DecodeError> {
                    match bytes.first() {
                        None => Err(DecodeError::Empty),
                        Some(&t) if t != $tag => Err(DecodeError::WrongType {
                            expected: $tag,
                            found: t,
                        }),
                        Some(_) => Self::with_len(bytes),
                    }
                }

                /// Borrows bytes whose type byte is already known to match.
                fn with_len(bytes: &'a [u8]) -> Result<Self, DecodeError> {
                    match <&[u8; $len]>::try_from(bytes) {
                        Ok(raw) => Ok(Self { raw }),
                        Err(_) => Err(DecodeError::wrong_length($tag, $len, bytes.len())),
                    }
                }

                /// The message bytes, type byte included.
                pub fn as_bytes(&self) -> &'a [u8; $len] {
                    self.raw
                }

                /// Stock locate, tracking number and timestamp.
                pub fn header(&self) -> Header {
                    Header::read(self.raw)
                }

                /// Locate code of the security.
                pub fn stock_locate(&self) -> u16 {
                    self.header().stock_locate
                }

                /// Nanoseconds since midnight.
                pub fn timestamp(&self) -> Timestamp {
                    self.header().timestamp
                }

                $(
                    $(#[doc = $fdoc])*
                    #[inline]
                    pub fn $field(&self) -> $fty {
                        <$fty as Field>::read(&self.raw[$off..$off + <$fty as Field>::SIZE])
                    }
                )*

                /// Calls `f` with each body field's name and value, in wire
                /// order (the header is [`Self::header`]). Never allocates.
                pub fn for_each_field(&self, mut f: impl FnMut(&'static str, FieldValue)) {
                    $( f(stringify!($field), FieldValue::from(self.$field())); )*
                }

                /// Decodes every field into the owned struct.
                pub fn decode(&self) -> $variant {
                    $variant {
                        header: self.header(),
                        $( $field: self.$field(), )*
                    }
                }
            }

            impl std::fmt::Debug for $view<'_> {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    std::fmt::Debug::fmt(&self.decode(), f)
                }
            }

            impl From<$variant> for OwnedMessage {
                fn from(m: $variant) -> Self {
                    OwnedMessage::$variant(m)
                }
            }
        )+

        /// A decoded ITCH 5.0 message borrowing its bytes: one zero-copy view
        /// per message type. Get one from [`decode`](super::decode).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Message<'a> {
            $(
                $(#[doc = $doc])*
                $variant($view<'a>),
            )+
        }

        impl<'a> Message<'a> {
            /// The message type byte.
            pub fn msg_type(&self) -> u8 {
                match self {
                    $( Message::$variant(_) => $tag, )+
                }
            }

            /// Stock locate, tracking number and timestamp.
            pub fn header(&self) -> Header {
                Header::read(self.as_bytes())
            }

            /// Locate code of the security (0 when the message concerns none).
            pub fn stock_locate(&self) -> u16 {
                self.header().stock_locate
            }

            /// Nanoseconds since midnight.
            pub fn timestamp(&self) -> Timestamp {
                self.header().timestamp
            }

            /// The message bytes, type byte included.
            pub fn as_bytes(&self) -> &'a [u8] {
                match self {
                    $( Message::$variant(v) => v.as_bytes(), )+
                }
            }

            /// Calls `f` with each body field's name and value, in wire
            /// order (the header is [`Message::header`]), so that a message
            /// of any type can be walked without matching on it. Never
            /// allocates.
            pub fn for_each_field(&self, f: impl FnMut(&'static str, FieldValue)) {
                match self {
                    $( Message::$variant(v) => v.for_each_field(f), )+
                }
            }

            /// Decodes every field into an owned message.
            pub fn decode(&self) -> OwnedMessage {
                match self {
                    $( Message::$variant(v) => OwnedMessage::$variant(v.decode()), )+
                }
            }
        }

        /// An ITCH 5.0 message with every field decoded: what the encoder
        /// takes and what tests compare.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum OwnedMessage {
            $(
                $(#[doc = $doc])*
                $variant($variant),
            )+
        }

        impl OwnedMessage {
            /// The message type byte.
            pub fn msg_type(&self) -> u8 {
                match self {
                    $( OwnedMessage::$variant(_) => $tag, )+
                }
            }

            /// Encoded length in bytes, type byte included.
            pub fn encoded_len(&self) -> usize {
                match self {
                    $( OwnedMessage::$variant(_) => $len, )+
                }
            }

            /// Stock locate, tracking number and timestamp.
            pub fn header(&self) -> &Header {
                match self {
                    $( OwnedMessage::$variant(m) => &m.header, )+
                }
            }

            /// Mutable access to the header, e.g. to restamp a message.
            pub fn header_mut(&mut self) -> &mut Header {
                match self {
                    $( OwnedMessage::$variant(m) => &mut m.header, )+
                }
            }

            /// Encodes into the start of `out`, returning the bytes written.
            ///
            /// # Errors
            /// `out` is shorter than [`OwnedMessage::encoded_len`].
            pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
                match self {
                    $( OwnedMessage::$variant(m) => m.encode(out), )+
                }
            }
        }

        /// The message length for a type byte, type byte included, or `None`
        /// for a type the specification does not define.
        pub const fn len_for(type_byte: u8) -> Option<usize> {
            match type_byte {
                $( $tag => Some($len), )+
                _ => None,
            }
        }

        /// Decodes one whole message: `bytes` must hold exactly one message
        /// (a MoldUDP64 message block, a BinaryFILE record). Borrows; never
        /// allocates; never panics.
        ///
        /// # Errors
        /// Empty input, an unknown type byte, or a length that differs from
        /// the specified length of its type.
        pub fn decode(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
            let Some(&t) = bytes.first() else {
                return Err(DecodeError::Empty);
            };
            match t {
                $( $tag => $view::with_len(bytes).map(Message::$variant), )+
                _ => Err(DecodeError::UnknownType(t)),
            }
        }

        /// Every message type of the specification, in specification order.
        pub const MESSAGE_TYPES: &[MessageType] = &[
            $(MessageType {
                type_byte: $tag,
                len: $len,
                name: stringify!($variant),
                fields: $variant::FIELDS,
            },)+
        ];
    };
}

itch_messages! {
    /// System Event (`S`, 12 bytes): start and end of messages,
    /// system hours and market hours.
    SystemEvent(SystemEventRef) = b'S', 12 {
        /// Event code, see [`codes::event`](super::codes::event).
        event_code: u8 = 11,
    }

    /// Stock Directory (`R`, 39 bytes): the locate code and
    /// attributes of one security, sent for every security at the start of
    /// the day.
    StockDirectory(StockDirectoryRef) = b'R', 39 {
        /// Security symbol.
        stock: Stock = 11,
        /// Listing market, see [`codes::market_category`](super::codes::market_category).
        market_category: u8 = 19,
        /// Financial status of a Nasdaq-listed issue, see
        /// [`codes::financial_status`](super::codes::financial_status).
        financial_status_indicator: u8 = 20,
        /// Shares in one round lot.
        round_lot_size: u32 = 21,
        /// `Y` if only round lots are accepted.
        round_lots_only: u8 = 25,
        /// Security class (`C` common stock, `A` ADR, ...).
        issue_classification: u8 = 26,
        /// Security sub-type, two characters.
        issue_sub_type: Alpha<2> = 27,
        /// `P` live/production, `T` test.
        authenticity: u8 = 29,
        /// `Y`/`N` Reg SHO threshold list, space if not available.
        short_sale_threshold_indicator: u8 = 30,
        /// `Y`/`N` new IPO security, space if not available.
        ipo_flag: u8 = 31,
        /// `1`/`2` LULD reference price tier, space if not available.
        luld_reference_price_tier: u8 = 32,
        /// `Y`/`N` exchange-traded product, space if not available.
        etp_flag: u8 = 33,
        /// Leverage factor of an ETP (integer).
        etp_leverage_factor: u32 = 34,
        /// `Y` for an inverse ETP.
        inverse_indicator: u8 = 38,
    }

    /// Stock Trading Action (`H`, 25 bytes): halt, pause,
    /// quotation-only or trading state of a security.
    StockTradingAction(StockTradingActionRef) = b'H', 25 {
        /// Security symbol.
        stock: Stock = 11,
        /// Trading state, see [`codes::trading_state`](super::codes::trading_state).
        trading_state: u8 = 19,
        /// Reserved.
        reserved: u8 = 20,
        /// Trading action reason, four characters (e.g. `T1  `).
        reason: Alpha<4> = 21,
    }

    /// Reg SHO Short Sale Price Test Restricted Indicator (`Y`, 20 bytes).
    RegShoRestriction(RegShoRestrictionRef) = b'Y', 20 {
        /// Security symbol.
        stock: Stock = 11,
        /// `0` no test, `1` in effect intraday, `2` remains in effect.
        reg_sho_action: u8 = 19,
    }

    /// Market Participant Position (`L`, 26 bytes): a market
    /// maker's status in one security.
    MarketParticipantPosition(MarketParticipantPositionRef) = b'L', 26 {
        /// Market participant identifier.
        mpid: Mpid = 11,
        /// Security symbol.
        stock: Stock = 15,
        /// `Y` primary market maker, `N` not.
        primary_market_maker: u8 = 23,
        /// `N` normal, `P` passive, `S` syndicate, `R` pre-syndicate, `L` penalty.
        market_maker_mode: u8 = 24,
        /// `A` active, `E` excused, `W` withdrawn, `S` suspended, `D` deleted.
        market_participant_state: u8 = 25,
    }

    /// MWCB Decline Level (`V`, 35 bytes): the three
    /// market-wide circuit breaker levels for the day.
    MwcbDeclineLevel(MwcbDeclineLevelRef) = b'V', 35 {
        /// Level 1 decline level.
        level1: Price8 = 11,
        /// Level 2 decline level.
        level2: Price8 = 19,
        /// Level 3 decline level.
        level3: Price8 = 27,
    }

    /// MWCB Status (`W`, 12 bytes): a market-wide circuit
    /// breaker level was breached.
    MwcbStatus(MwcbStatusRef) = b'W', 12 {
        /// `1`, `2` or `3`.
        breached_level: u8 = 11,
    }

    /// IPO Quoting Period Update (`K`, 28 bytes).
    IpoQuotingPeriodUpdate(IpoQuotingPeriodUpdateRef) = b'K', 28 {
        /// Security symbol.
        stock: Stock = 11,
        /// Anticipated quotation release time, seconds since midnight.
        ipo_quotation_release_time: u32 = 19,
        /// `A` anticipated, `C` canceled or postponed.
        ipo_quotation_release_qualifier: u8 = 23,
        /// IPO price.
        ipo_price: Price4 = 24,
    }

    /// LULD Auction Collar (`J`, 35 bytes).
    LuldAuctionCollar(LuldAuctionCollarRef) = b'J', 35 {
        /// Security symbol.
        stock: Stock = 11,
        /// Reference price for the auction collar.
        auction_collar_reference_price: Price4 = 19,
        /// Upper collar price.
        upper_auction_collar_price: Price4 = 23,
        /// Lower collar price.
        lower_auction_collar_price: Price4 = 27,
        /// Number of extensions to the reopening auction.
        auction_collar_extension: u32 = 31,
    }

    /// Operational Halt (`h`, 21 bytes): a halt on one market
    /// for operational reasons.
    OperationalHalt(OperationalHaltRef) = b'h', 21 {
        /// Security symbol.
        stock: Stock = 11,
        /// `Q` Nasdaq, `B` BX, `X` PSX.
        market_code: u8 = 19,
        /// `H` halted, `T` resumed.
        operational_halt_action: u8 = 20,
    }

    /// Add Order, no MPID attribution (`A`, 36 bytes).
    AddOrder(AddOrderRef) = b'A', 36 {
        /// Order reference number, unique for the day.
        order_reference_number: u64 = 11,
        /// `B` buy, `S` sell.
        buy_sell_indicator: u8 = 19,
        /// Shares displayed.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Display price.
        price: Price4 = 32,
    }

    /// Add Order with MPID attribution (`F`, 40 bytes).
    AddOrderMpid(AddOrderMpidRef) = b'F', 40 {
        /// Order reference number, unique for the day.
        order_reference_number: u64 = 11,
        /// `B` buy, `S` sell.
        buy_sell_indicator: u8 = 19,
        /// Shares displayed.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Display price.
        price: Price4 = 32,
        /// MPID of the entering firm.
        attribution: Mpid = 36,
    }

    /// Order Executed (`E`, 31 bytes): part or all of a
    /// displayed order executed at its display price.
    OrderExecuted(OrderExecutedRef) = b'E', 31 {
        /// Reference of the order executed.
        order_reference_number: u64 = 11,
        /// Shares executed.
        executed_shares: u32 = 19,
        /// Match number, unique for the day.
        match_number: u64 = 23,
    }

    /// Order Executed With Price (`C`, 36 bytes): an execution
    /// at a price other than the display price.
    OrderExecutedWithPrice(OrderExecutedWithPriceRef) = b'C', 36 {
        /// Reference of the order executed.
        order_reference_number: u64 = 11,
        /// Shares executed.
        executed_shares: u32 = 19,
        /// Match number, unique for the day.
        match_number: u64 = 23,
        /// `Y` printable (counts toward volume), `N` not.
        printable: u8 = 31,
        /// Execution price.
        execution_price: Price4 = 32,
    }

    /// Order Cancel (`X`, 23 bytes): part of an order canceled.
    OrderCancel(OrderCancelRef) = b'X', 23 {
        /// Reference of the order reduced.
        order_reference_number: u64 = 11,
        /// Shares removed from the order.
        cancelled_shares: u32 = 19,
    }

    /// Order Delete (`D`, 19 bytes): the whole order removed.
    OrderDelete(OrderDeleteRef) = b'D', 19 {
        /// Reference of the order removed.
        order_reference_number: u64 = 11,
    }

    /// Order Replace (`U`, 35 bytes): an order replaced by a
    /// new one with a new reference, keeping side and security.
    OrderReplace(OrderReplaceRef) = b'U', 35 {
        /// Reference of the order replaced.
        original_order_reference_number: u64 = 11,
        /// Reference of the replacing order.
        new_order_reference_number: u64 = 19,
        /// Shares of the new order.
        shares: u32 = 27,
        /// Price of the new order.
        price: Price4 = 31,
    }

    /// Trade, non-cross (`P`, 44 bytes): an execution against a
    /// non-displayed order.
    Trade(TradeRef) = b'P', 44 {
        /// Reference of the non-displayed order (often 0).
        order_reference_number: u64 = 11,
        /// `B` buy, `S` sell: the side of the non-displayed order.
        buy_sell_indicator: u8 = 19,
        /// Shares executed.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Execution price.
        price: Price4 = 32,
        /// Match number, unique for the day.
        match_number: u64 = 36,
    }

    /// Cross Trade (`Q`, 40 bytes): the bulk print of an
    /// opening, closing, IPO/halt or intraday cross.
    CrossTrade(CrossTradeRef) = b'Q', 40 {
        /// Shares matched in the cross (8 bytes in ITCH 5.0).
        shares: u64 = 11,
        /// Security symbol.
        stock: Stock = 19,
        /// Cross price.
        cross_price: Price4 = 27,
        /// Match number, unique for the day.
        match_number: u64 = 31,
        /// Cross type, see [`codes::cross_type`](super::codes::cross_type).
        cross_type: u8 = 39,
    }

    /// Broken Trade (`B`, 19 bytes): a previous execution was
    /// broken.
    BrokenTrade(BrokenTradeRef) = b'B', 19 {
        /// Match number of the execution broken.
        match_number: u64 = 11,
    }

    /// Net Order Imbalance Indicator (`I`, 50 bytes).
    Noii(NoiiRef) = b'I', 50 {
        /// Shares paired at the current reference price.
        paired_shares: u64 = 11,
        /// Shares not paired at the current reference price.
        imbalance_shares: u64 = 19,
        /// `B` buy, `S` sell, `N` none, `O` insufficient orders, `P` paused.
        imbalance_direction: u8 = 27,
        /// Security symbol.
        stock: Stock = 28,
        /// Hypothetical auction-clearing price for cross orders only.
        far_price: Price4 = 36,
        /// Hypothetical auction-clearing price for cross and continuous orders.
        near_price: Price4 = 40,
        /// Price at which the NOII shares are calculated.
        current_reference_price: Price4 = 44,
        /// Cross type, see [`codes::cross_type`](super::codes::cross_type).
        cross_type: u8 = 48,
        /// Deviation of the near price from the reference price, `L`, `1`-`9`, `A`-`C` or space.
        price_variation_indicator: u8 = 49,
    }

    /// Retail Price Improvement Indicator (`N`, 20 bytes).
    RetailPriceImprovementIndicator(RetailPriceImprovementIndicatorRef) = b'N', 20 {
        /// Security symbol.
        stock: Stock = 11,
        /// `B` buy side, `S` sell side, `A` both, `N` none.
        interest_flag: u8 = 19,
    }

    /// Direct Listing with Capital Raise Price Discovery (`O`, 48 bytes).
    DirectListingCapitalRaise(DirectListingCapitalRaiseRef) = b'O', 48 {
        /// Security symbol.
        stock: Stock = 11,
        /// `N` not eligible, `Y` eligible to open.
        open_eligibility_status: u8 = 19,
        /// Minimum allowable price (20% below the registration's lower price).
        minimum_allowable_price: Price4 = 20,
        /// Maximum allowable price (80% above the registration's upper price).
        maximum_allowable_price: Price4 = 24,
        /// Near execution price.
        near_execution_price: Price4 = 28,
        /// Time at which the near execution price was set.
        near_execution_time: u64 = 32,
        /// Lower price range collar.
        lower_price_range_collar: Price4 = 40,
        /// Upper price range collar.
        upper_price_range_collar: Price4 = 44,
    }
}
