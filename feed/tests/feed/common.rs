//! Shared test fixtures: one sample of every ITCH message type, and scratch
//! directories.

use std::path::{Path, PathBuf};

use mdbus_feed::alpha::{Alpha, Mpid, Stock};
use mdbus_feed::itch::*;

pub fn stock(s: &str) -> Stock {
    Stock::new(s).unwrap()
}

pub fn mpid(s: &str) -> Mpid {
    Mpid::new(s).unwrap()
}

/// A header whose three fields all differ and use every byte, so a field
/// read from the wrong offset shows.
pub fn header(locate: u16) -> Header {
    Header {
        stock_locate: locate,
        tracking_number: 0x0203,
        timestamp: Timestamp::new(0x0405_0607_0809).unwrap(),
    }
}

/// One message of every type, every field set to a distinct, non-zero,
/// non-space value.
pub fn one_of_each() -> Vec<OwnedMessage> {
    vec![
        SystemEvent {
            header: header(0),
            event_code: b'O',
        }
        .into(),
        StockDirectory {
            header: header(0x0101),
            stock: stock("AAPL"),
            market_category: b'Q',
            financial_status_indicator: b'N',
            round_lot_size: 100,
            round_lots_only: b'N',
            issue_classification: b'C',
            issue_sub_type: Alpha(*b"Z "),
            authenticity: b'P',
            short_sale_threshold_indicator: b'N',
            ipo_flag: b'Y',
            luld_reference_price_tier: b'1',
            etp_flag: b'N',
            etp_leverage_factor: 0x0a0b_0c0d,
            inverse_indicator: b'Y',
        }
        .into(),
        StockTradingAction {
            header: header(0x0102),
            stock: stock("MSFT"),
            trading_state: b'H',
            reserved: b'x',
            reason: Alpha(*b"T1  "),
        }
        .into(),
        RegShoRestriction {
            header: header(0x0103),
            stock: stock("TSLA"),
            reg_sho_action: b'1',
        }
        .into(),
        MarketParticipantPosition {
            header: header(0x0104),
            mpid: mpid("GSCO"),
            stock: stock("NVDA"),
            primary_market_maker: b'Y',
            market_maker_mode: b'N',
            market_participant_state: b'A',
        }
        .into(),
        MwcbDeclineLevel {
            header: header(0),
            level1: Price8(0x1112_1314_1516_1718),
            level2: Price8(0x2122_2324_2526_2728),
            level3: Price8(0x3132_3334_3536_3738),
        }
        .into(),
        MwcbStatus {
            header: header(0),
            breached_level: b'2',
        }
        .into(),
        IpoQuotingPeriodUpdate {
            header: header(0x0105),
            stock: stock("NEWCO"),
            ipo_quotation_release_time: 0x4142_4344,
            ipo_quotation_release_qualifier: b'A',
            ipo_price: Price4(0x5152_5354),
        }
        .into(),
        LuldAuctionCollar {
            header: header(0x0106),
            stock: stock("GME"),
            auction_collar_reference_price: Price4(0x6162_6364),
            upper_auction_collar_price: Price4(0x7172_7374),
            lower_auction_collar_price: Price4(0x0102_0304),
            auction_collar_extension: 0x1112_1314,
        }
        .into(),
        OperationalHalt {
            header: header(0x0107),
            stock: stock("AMC"),
            market_code: b'Q',
            operational_halt_action: b'H',
        }
        .into(),
        AddOrder {
            header: header(0x0108),
            order_reference_number: 0x0102_0304_0506_0708,
            buy_sell_indicator: b'B',
            shares: 0x1112_1314,
            stock: stock("ZVZZT"),
            price: Price4(0x2122_2324),
        }
        .into(),
        AddOrderMpid {
            header: header(0x0109),
            order_reference_number: 0x1102_0304_0506_0708,
            buy_sell_indicator: b'S',
            shares: 0x3132_3334,
            stock: stock("ZXZZT"),
            price: Price4(0x4142_4344),
            attribution: mpid("NSDQ"),
        }
        .into(),
        OrderExecuted {
            header: header(0x010a),
            order_reference_number: 0x2102_0304_0506_0708,
            executed_shares: 0x5152_5354,
            match_number: 0x6162_6364_6566_6768,
        }
        .into(),
        OrderExecutedWithPrice {
            header: header(0x010b),
            order_reference_number: 0x3102_0304_0506_0708,
            executed_shares: 0x7172_7374,
            match_number: 0x0a0b_0c0d_0e0f_1011,
            printable: b'Y',
            execution_price: Price4(0x1213_1415),
        }
        .into(),
        OrderCancel {
            header: header(0x010c),
            order_reference_number: 0x4102_0304_0506_0708,
            cancelled_shares: 0x2223_2425,
        }
        .into(),
        OrderDelete {
            header: header(0x010d),
            order_reference_number: 0x5102_0304_0506_0708,
        }
        .into(),
        OrderReplace {
            header: header(0x010e),
            original_order_reference_number: 0x6102_0304_0506_0708,
            new_order_reference_number: 0x7102_0304_0506_0708,
            shares: 0x3233_3435,
            price: Price4(0x4243_4445),
        }
        .into(),
        Trade {
            header: header(0x010f),
            order_reference_number: 0x0a02_0304_0506_0708,
            buy_sell_indicator: b'B',
            shares: 0x5253_5455,
            stock: stock("QQQ"),
            price: Price4(0x6263_6465),
            match_number: 0x0b02_0304_0506_0708,
        }
        .into(),
        CrossTrade {
            header: header(0x0110),
            shares: 0x0c02_0304_0506_0708,
            stock: stock("SPY"),
            cross_price: Price4(0x7273_7475),
            match_number: 0x0d02_0304_0506_0708,
            cross_type: b'O',
        }
        .into(),
        BrokenTrade {
            header: header(0x0111),
            match_number: 0x0e02_0304_0506_0708,
        }
        .into(),
        Noii {
            header: header(0x0112),
            paired_shares: 0x0f02_0304_0506_0708,
            imbalance_shares: 0x1002_0304_0506_0708,
            imbalance_direction: b'B',
            stock: stock("IWM"),
            far_price: Price4(0x0203_0405),
            near_price: Price4(0x0304_0506),
            current_reference_price: Price4(0x0405_0607),
            cross_type: b'C',
            price_variation_indicator: b'L',
        }
        .into(),
        RetailPriceImprovementIndicator {
            header: header(0x0113),
            stock: stock("DIA"),
            interest_flag: b'A',
        }
        .into(),
        DirectListingCapitalRaise {
            header: header(0x0114),
            stock: stock("DLCR"),
            open_eligibility_status: b'Y',
            minimum_allowable_price: Price4(0x0506_0708),
            maximum_allowable_price: Price4(0x0607_0809),
            near_execution_price: Price4(0x0708_090a),
            near_execution_time: 0x1112_1314_1516_1718,
            lower_price_range_collar: Price4(0x0809_0a0b),
            upper_price_range_collar: Price4(0x090a_0b0c),
        }
        .into(),
    ]
}

pub fn encode(m: &OwnedMessage) -> Vec<u8> {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = m.encode(&mut buf).unwrap();
    buf[..n].to_vec()
}

/// A scratch directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mdbus-feed-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    #[allow(dead_code)]
    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
