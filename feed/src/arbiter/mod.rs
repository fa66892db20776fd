//! MoldUDP64 A/B line arbitration and gap recovery, without I/O.
