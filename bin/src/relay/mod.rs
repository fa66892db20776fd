//! `mdbus-relay`: MoldUDP64/ITCH 5.0 in, routed mdbus streams out.
