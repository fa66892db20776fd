//! `mdbus-replay`: captures replayed through the bus, latency histograms out.
