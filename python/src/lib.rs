//! The `mdbus` Python module (`mdbus._mdbus`, re-exported by
//! `python/mdbus/__init__.py`): buses, stream publishers and subscribers,
//! sessions, `.mdcap` recordings, ITCH messages and `.hlog` latency logs.
//! Every call that may wait (polls, attaches, accepts, connects, sends)
//! releases the GIL.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

create_exception!(
    mdbus,
    Error,
    PyException,
    "An mdbus failure; the message is the library's sentence."
);
create_exception!(
    mdbus,
    PeerClosed,
    Error,
    "The session's peer closed it (everything it sent was delivered)."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

fn bus_err(e: mdbus::Error) -> PyErr {
    match e {
        mdbus::Error::PeerClosed { .. } => PeerClosed::new_err(e.to_string()),
        e => err(e),
    }
}

/// A handle behind a mutex: Python may share objects between threads, and
/// mdbus handles are owned by one thread at a time.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Longest stretch spent without the GIL in one go, so that Ctrl-C is seen.
const SLICE: Duration = Duration::from_millis(100);

/// A configured bus.
#[pyclass(module = "mdbus", frozen)]
struct Bus {
    bus: mdbus::Bus,
}

#[pymethods]
impl Bus {
    /// Opens a bus from a TOML configuration file.
    #[staticmethod]
    fn from_file(path: &str) -> PyResult<Bus> {
        let cfg = mdbus::Config::from_file(path).map_err(err)?;
        Ok(Bus {
            bus: mdbus::Bus::new(cfg).map_err(bus_err)?,
        })
    }

    /// Opens a bus from TOML configuration text.
    #[staticmethod]
    fn from_toml(text: &str) -> PyResult<Bus> {
        let cfg = mdbus::Config::from_toml_str(text, "<toml>").map_err(err)?;
        Ok(Bus {
            bus: mdbus::Bus::new(cfg).map_err(bus_err)?,
        })
    }

    /// The transport in use: "shm", "udp", "tcp" or "verbs".
    #[getter]
    fn transport(&self) -> &'static str {
        self.bus.transport().name()
    }

    /// Creates the publisher of stream `name`.
    fn publisher(&self, name: &str) -> PyResult<Publisher> {
        Ok(Publisher {
            inner: Mutex::new(Some(self.bus.publisher(name).map_err(bus_err)?)),
        })
    }

    /// Subscribes to stream `name` (waits for its publisher on shared memory).
    fn subscriber(&self, py: Python<'_>, name: &str) -> PyResult<Subscriber> {
        let bus = self.bus.clone();
        let s = py.detach(|| bus.subscriber(name)).map_err(bus_err)?;
        Ok(Subscriber {
            inner: Mutex::new(Some(s)),
        })
    }

    /// Offers session `name` and waits for the peer to connect.
    fn session_accept(&self, py: Python<'_>, name: &str) -> PyResult<Session> {
        let bus = self.bus.clone();
        let s = py.detach(|| bus.session_accept(name)).map_err(bus_err)?;
        Ok(Session::new(s))
    }

    /// Connects to session `name`, waiting for the acceptor.
    fn session_connect(&self, py: Python<'_>, name: &str) -> PyResult<Session> {
        let bus = self.bus.clone();
        let s = py.detach(|| bus.session_connect(name)).map_err(bus_err)?;
        Ok(Session::new(s))
    }
}

fn closed(what: &str) -> PyErr {
    Error::new_err(format!("the {what} is closed"))
}

/// The publisher of one stream.
#[pyclass(module = "mdbus", frozen)]
struct Publisher {
    inner: Mutex<Option<mdbus::Publisher>>,
}

#[pymethods]
impl Publisher {
    /// Publishes `data` (bytes); returns its sequence number.
    fn publish(&self, data: &[u8]) -> PyResult<u64> {
        let mut g = lock(&self.inner);
        let p = g.as_mut().ok_or_else(|| closed("publisher"))?;
        p.publish(data).map_err(bus_err)
    }

    /// Sends batched messages (streams with autoflush = false).
    fn flush(&self) -> PyResult<()> {
        let mut g = lock(&self.inner);
        g.as_mut()
            .ok_or_else(|| closed("publisher"))?
            .flush()
            .map_err(bus_err)
    }

    /// Heartbeats and retransmissions on datagram transports; call when
    /// idle unless the bus runs a service thread.
    fn service(&self) -> PyResult<()> {
        let mut g = lock(&self.inner);
        g.as_mut()
            .ok_or_else(|| closed("publisher"))?
            .service()
            .map_err(bus_err)
    }

    /// Messages published so far.
    #[getter]
    fn published(&self) -> PyResult<u64> {
        let g = lock(&self.inner);
        Ok(g.as_ref().ok_or_else(|| closed("publisher"))?.published())
    }

    /// Closes the stream: subscribers see end of stream.
    fn close(&self) {
        lock(&self.inner).take();
    }
}

/// One event, as `poll` returns it.
#[pyclass(module = "mdbus", frozen, get_all)]
struct Event {
    /// "message", "overrun", "gap", "end_of_stream", "publisher_down",
    /// "publisher_restarted" or "source_gap".
    kind: &'static str,
    /// A message's sequence; the last sequence for end_of_stream and
    /// publisher_down; 0 otherwise.
    seq: u64,
    /// A message's bytes; empty otherwise.
    payload: Py<PyBytes>,
    /// First lost sequence (overrun, gap, source_gap); else 0.
    from_seq: u64,
    /// Sequence delivery resumes at (overrun, gap, source_gap); else 0.
    to_seq: u64,
    /// The new epoch (publisher_restarted); else 0.
    epoch: u64,
    /// Send time in ns since the epoch when stamped; else None.
    timestamp_ns: Option<u64>,
}

#[pymethods]
impl Event {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Event(kind={:?}, seq={}, payload={} bytes, from_seq={}, to_seq={})",
            self.kind,
            self.seq,
            self.payload.bind(py).as_bytes().len(),
            self.from_seq,
            self.to_seq
        )
    }
}

/// An event copied out while the GIL is released.
struct Owned {
    kind: &'static str,
    seq: u64,
    payload: Vec<u8>,
    from: u64,
    to: u64,
    epoch: u64,
    timestamp: Option<u64>,
}

impl Owned {
    fn of(e: &mdbus::Event<'_>) -> Owned {
        use mdbus::Event as E;
        let mut o = Owned {
            kind: "",
            seq: 0,
            payload: Vec::new(),
            from: 0,
            to: 0,
            epoch: 0,
            timestamp: None,
        };
        match *e {
            E::Message(ref m) => {
                o.kind = "message";
                o.seq = m.seq();
                o.payload = m.payload().to_vec();
                o.timestamp = m.timestamp();
            }
            E::Overrun { from, to } => (o.kind, o.from, o.to) = ("overrun", from, to),
            E::Gap { from, to } => (o.kind, o.from, o.to) = ("gap", from, to),
            E::SourceGap { from, to } => (o.kind, o.from, o.to) = ("source_gap", from, to),
            E::EndOfStream { last_seq } => (o.kind, o.seq) = ("end_of_stream", last_seq),
            E::PublisherDown { last_seq } => (o.kind, o.seq) = ("publisher_down", last_seq),
            E::PublisherRestarted { epoch } => (o.kind, o.epoch) = ("publisher_restarted", epoch),
        }
        o
    }

    fn into_py(self, py: Python<'_>) -> Event {
        Event {
            kind: self.kind,
            seq: self.seq,
            payload: PyBytes::new(py, &self.payload).unbind(),
            from_seq: self.from,
            to_seq: self.to,
            epoch: self.epoch,
            timestamp_ns: self.timestamp,
        }
    }
}

/// Polls with `poll_once` until it yields events or `timeout` (seconds)
/// passes, without the GIL, checking for signals between slices.
fn poll_loop(
    py: Python<'_>,
    timeout: Option<f64>,
    mut poll_once: impl FnMut(&mut Vec<Owned>) -> PyResult<()> + Send,
) -> PyResult<Vec<Event>> {
    let wait = Duration::from_secs_f64(timeout.unwrap_or(0.0).max(0.0));
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    loop {
        let slice_end = (Instant::now() + SLICE).min(deadline);
        py.detach(|| -> PyResult<()> {
            loop {
                poll_once(&mut out)?;
                if !out.is_empty() || Instant::now() >= slice_end {
                    return Ok(());
                }
                std::thread::yield_now();
            }
        })?;
        if !out.is_empty() || Instant::now() >= deadline {
            break;
        }
        py.check_signals()?;
    }
    Ok(out.into_iter().map(|o| o.into_py(py)).collect())
}

/// A subscriber of one stream.
#[pyclass(module = "mdbus", frozen)]
struct Subscriber {
    inner: Mutex<Option<mdbus::Subscriber>>,
}

#[pymethods]
impl Subscriber {
    /// Returns the events that arrived, waiting up to `timeout` seconds
    /// (default 0: do not wait) for the first; [] when none came. The GIL
    /// is released meanwhile.
    #[pyo3(signature = (timeout=None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Event>> {
        let mut g = lock(&self.inner);
        let s = g.as_mut().ok_or_else(|| closed("subscriber"))?;
        poll_loop(py, timeout, |out| {
            s.poll(|e| out.push(Owned::of(&e)))
                .map(drop)
                .map_err(bus_err)
        })
    }

    /// Counters: received, overruns, overrun_messages, gaps, gap_messages.
    fn stats(&self) -> PyResult<(u64, u64, u64, u64, u64)> {
        let g = lock(&self.inner);
        let s = g.as_ref().ok_or_else(|| closed("subscriber"))?.stats();
        Ok((
            s.received,
            s.overruns,
            s.overrun_messages,
            s.gaps,
            s.gap_messages,
        ))
    }

    /// Leaves the stream.
    fn close(&self) {
        lock(&self.inner).take();
    }
}

/// One end of a session.
#[pyclass(module = "mdbus", frozen)]
struct Session {
    inner: Mutex<Option<mdbus::Session>>,
}

impl Session {
    fn new(s: mdbus::Session) -> Session {
        Session {
            inner: Mutex::new(Some(s)),
        }
    }
}

#[pymethods]
impl Session {
    /// Sends `data`, waiting (GIL released) while the peer has no room;
    /// returns its sequence number.
    fn send(&self, py: Python<'_>, data: &[u8]) -> PyResult<u64> {
        let mut g = lock(&self.inner);
        let s = g.as_mut().ok_or_else(|| closed("session"))?;
        py.detach(|| s.send(data)).map_err(bus_err)
    }

    /// Returns received messages as events of kind "message", waiting up to
    /// `timeout` seconds for the first. Raises PeerClosed once the peer
    /// closed and everything it sent was returned.
    #[pyo3(signature = (timeout=None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Event>> {
        let mut g = lock(&self.inner);
        let s = g.as_mut().ok_or_else(|| closed("session"))?;
        poll_loop(py, timeout, |out| {
            s.poll(|m| out.push(Owned::of(&mdbus::Event::Message(m))))
                .map(drop)
                .map_err(bus_err)
        })
    }

    /// Closes this end in order.
    fn close(&self) {
        if let Some(s) = lock(&self.inner).take() {
            s.close();
        }
    }
}

/// One `.mdcap` record.
#[pyclass(module = "mdbus", frozen, get_all)]
struct Record {
    /// Arrival time, ns since the Unix epoch.
    timestamp_ns: u64,
    /// Upstream (MoldUDP64) sequence number.
    sequence: u64,
    /// The stream it was published on: an index into the recording's
    /// `streams`, 65535 for every stream, 65534 for none.
    stream: u16,
    /// The message bytes.
    data: Py<PyBytes>,
}

/// An `.mdcap` recording, iterated record by record.
#[pyclass(module = "mdbus", frozen)]
struct Mdcap {
    reader: Mutex<mdbus_feed::mdcap::MdcapReader<std::io::BufReader<std::fs::File>>>,
}

#[pymethods]
impl Mdcap {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Record>> {
        let mut r = lock(&self.reader);
        match r.next_record().map_err(err)? {
            Some(rec) => Ok(Some(Record {
                timestamp_ns: rec.timestamp_ns,
                sequence: rec.sequence,
                stream: rec.stream,
                data: PyBytes::new(py, rec.data).unbind(),
            })),
            None => Ok(None),
        }
    }

    /// Records read so far.
    #[getter]
    fn records_read(&self) -> u64 {
        lock(&self.reader).records_read()
    }

    /// The recording's stream names, which records' `stream` indexes.
    #[getter]
    fn streams(&self) -> Vec<String> {
        lock(&self.reader).streams().to_vec()
    }
}

/// Opens an `.mdcap` recording (as `mdbus-relay --record` writes) for
/// iteration.
#[pyfunction]
fn read_mdcap(path: &str) -> PyResult<Mdcap> {
    Ok(Mdcap {
        reader: Mutex::new(mdbus_feed::mdcap::MdcapReader::open(path).map_err(err)?),
    })
}

/// An `.mdcap` recording as columns: a dict of `array.array` ("Q":
/// "timestamp_ns", "sequence"; "I": "length"; "H": "stream", an index
/// into "streams", 65535 for every stream, 65534 for none), one entry per
/// record, and "streams", the list of stream names.
/// `numpy.asarray(cols["sequence"])` wraps one without a copy.
#[pyfunction]
fn read_mdcap_columns<'py>(
    py: Python<'py>,
    path: &str,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let (mut ts, mut seq, mut len, mut stream) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut streams = Vec::new();
    py.detach(|| -> Result<(), mdbus_feed::mdcap::MdcapError> {
        let mut r = mdbus_feed::mdcap::MdcapReader::open(path)?;
        streams = r.streams().to_vec();
        while let Some(rec) = r.next_record()? {
            stream.extend_from_slice(&rec.stream.to_ne_bytes());
            ts.extend_from_slice(&rec.timestamp_ns.to_ne_bytes());
            seq.extend_from_slice(&rec.sequence.to_ne_bytes());
            // The file stores each length as a u32, so it fits.
            let n = u32::try_from(rec.data.len()).unwrap_or(u32::MAX);
            len.extend_from_slice(&n.to_ne_bytes());
        }
        Ok(())
    })
    .map_err(err)?;
    let array = py.import("array")?.getattr("array")?;
    let column = |code: &str, bytes: &[u8]| -> PyResult<Bound<'py, PyAny>> {
        let a = array.call1((code,))?;
        a.call_method1("frombytes", (PyBytes::new(py, bytes),))?;
        Ok(a)
    };
    let out = pyo3::types::PyDict::new(py);
    out.set_item("timestamp_ns", column("Q", &ts)?)?;
    out.set_item("sequence", column("Q", &seq)?)?;
    out.set_item("length", column("I", &len)?)?;
    out.set_item("stream", column("H", &stream)?)?;
    out.set_item("streams", streams)?;
    Ok(out)
}

/// Percentiles of an `.hlog` latency log (as `mdbus-replay run` writes),
/// all intervals merged: a dict with "count", "min", "max", "mean" and
/// "percentiles" ({percentile: value}). Values are in the log's unit (ns).
#[pyfunction]
#[pyo3(signature = (path, percentiles=vec![50.0, 90.0, 99.0, 99.9, 99.99]))]
fn hlog_percentiles<'py>(
    py: Python<'py>,
    path: &str,
    percentiles: Vec<f64>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
    mdbus_replay::hlog::read_hlog(std::path::Path::new(path), |i| {
        match &mut merged {
            None => merged = Some(i.histogram),
            Some(m) => m.add(&i.histogram).map_err(|e| {
                mdbus_replay::ReplayError::Run(format!("{path}: line {}: {e:?}", i.line))
            })?,
        }
        Ok(())
    })
    .map_err(err)?;
    let h = merged.ok_or_else(|| Error::new_err(format!("{path} holds no interval")))?;
    let out = pyo3::types::PyDict::new(py);
    out.set_item("count", h.len())?;
    out.set_item("min", h.min())?;
    out.set_item("max", h.max())?;
    out.set_item("mean", h.mean())?;
    let p = pyo3::types::PyDict::new(py);
    for q in percentiles {
        p.set_item(q, h.value_at_percentile(q))?;
    }
    out.set_item("percentiles", p)?;
    Ok(out)
}

/// Decodes one whole ITCH 5.0 message (the bytes of one MoldUDP64 message
/// block, `.mdcap` record or BinaryFILE record) with mdbus-feed's decoder:
/// a dict with "type" (the type letter), "name" (e.g. "AddOrder"),
/// "stock_locate", "tracking_number", "timestamp" (ns since midnight), then
/// every body field by its name in the specification's order. One-byte
/// codes are 1-character strings, alphanumeric fields (stock, MPID) strings
/// without their padding (bytes if not printable ASCII), integers and
/// prices ints: a Price(4) in 1/10 000 dollar (PRICE4_SCALE), a Price(8)
/// (the MWCB levels) in 1/100 000 000 (PRICE8_SCALE).
/// Accepts any bytes-like object (bytes, bytearray, memoryview).
#[pyfunction]
fn itch_decode<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use mdbus_feed::itch::{self, FieldValue};
    // bytes are read in place; anything else goes through bytes(data).
    let owned;
    let data = match data.cast::<PyBytes>() {
        Ok(b) => b,
        Err(_) => {
            owned = py
                .get_type::<PyBytes>()
                .call1((data,))?
                .cast_into::<PyBytes>()?;
            &owned
        }
    };
    let m = itch::decode(data.as_bytes()).map_err(err)?;
    let out = pyo3::types::PyDict::new(py);
    let t = m.msg_type();
    out.set_item("type", char::from(t).to_string())?;
    out.set_item("name", itch::type_name(t).unwrap_or(""))?;
    let h = m.header();
    out.set_item("stock_locate", h.stock_locate)?;
    out.set_item("tracking_number", h.tracking_number)?;
    out.set_item("timestamp", h.timestamp.nanos())?;
    let mut failed = None;
    m.for_each_field(|name, v| {
        let r = match v {
            FieldValue::Code(b) => out.set_item(name, char::from(b).to_string()),
            FieldValue::Integer(n) => out.set_item(name, n),
            FieldValue::Price4(p) => out.set_item(name, p.raw()),
            FieldValue::Price8(p) => out.set_item(name, p.raw()),
            FieldValue::Timestamp(t) => out.set_item(name, t.nanos()),
            FieldValue::Alpha { .. } => {
                let b = v.alpha_trimmed();
                match std::str::from_utf8(b) {
                    Ok(s) if b.iter().all(|c| (0x20..=0x7e).contains(c)) => out.set_item(name, s),
                    _ => out.set_item(name, PyBytes::new(py, b)),
                }
            }
        };
        if let Err(e) = r {
            failed.get_or_insert(e);
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

#[pymodule]
fn _mdbus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("PeerClosed", m.py().get_type::<PeerClosed>())?;
    m.add_class::<Bus>()?;
    m.add_class::<Publisher>()?;
    m.add_class::<Subscriber>()?;
    m.add_class::<Session>()?;
    m.add_class::<Event>()?;
    m.add_class::<Record>()?;
    m.add_class::<Mdcap>()?;
    m.add_function(wrap_pyfunction!(read_mdcap, m)?)?;
    m.add_function(wrap_pyfunction!(hlog_percentiles, m)?)?;
    m.add_function(wrap_pyfunction!(read_mdcap_columns, m)?)?;
    m.add_function(wrap_pyfunction!(itch_decode, m)?)?;
    m.add("PRICE4_SCALE", mdbus_feed::itch::Price4::SCALE)?;
    m.add("PRICE8_SCALE", mdbus_feed::itch::Price8::SCALE)?;
    Ok(())
}
