//! mdbus's own capture format (.mdcap): timestamped ITCH messages as the relay saw them.
