//! An exchange simulator: an ITCH 5.0 session over MoldUDP64 on A and B multicast lines, with a re-request server.
