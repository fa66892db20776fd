//! The C API called as C calls it: error codes and sentences, refused
//! handles, every stream event kind, sessions, and a hot path that
//! allocates nothing.

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};

use crate::*;

#[global_allocator]
static A: mdbus_testkit::alloc::Counting = mdbus_testkit::alloc::Counting;

use mdbus_testkit::alloc::allocs;

fn last_error() -> String {
    // SAFETY: never null, NUL-terminated, valid until the next failure here.
    unsafe { CStr::from_ptr(mdbus_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A shared-memory bus in its own directory.
fn shm_bus(name: &str) -> (*mut mdbus_bus, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("mdbus-capi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = CString::new(format!(
        "transport = \"shm\"\n[shm]\ndir = \"{}\"\n[streams.md]\nmax_message = 64\n\
         capacity = 1024\ntimestamps = true\n[sessions.o]\nmax_message = 64\n",
        dir.display()
    ))
    .unwrap();
    let mut bus = null_mut();
    assert_eq!(
        // SAFETY: valid string and out pointer.
        unsafe { mdbus_bus_open_toml(toml.as_ptr(), &mut bus) },
        MDBUS_OK
    );
    (bus, dir)
}

/// One event as recorded: kind, seq, payload, from, to, epoch, stamped.
type Recorded = (u32, u64, Vec<u8>, u64, u64, u64, bool);

#[derive(Default)]
struct Seen {
    events: Vec<Recorded>,
}

unsafe extern "C" fn record(ctx: *mut c_void, ev: *const mdbus_event) {
    // SAFETY: the tests pass a `Seen` as ctx; the event is valid for the call.
    let (seen, ev) = unsafe { (&mut *ctx.cast::<Seen>(), &*ev) };
    let payload = if ev.payload.is_null() {
        Vec::new()
    } else {
        // SAFETY: payload..payload+len is valid during the callback.
        unsafe { std::slice::from_raw_parts(ev.payload, ev.len) }.to_vec()
    };
    seen.events.push((
        ev.kind,
        ev.seq,
        payload,
        ev.from,
        ev.to,
        ev.epoch,
        ev.timestamp_ns != 0,
    ));
}

unsafe extern "C" fn count(ctx: *mut c_void, ev: *const mdbus_event) {
    // SAFETY: the test passes a u64 counter; the event is valid for the call.
    unsafe { *ctx.cast::<u64>() += (*ev).len as u64 };
}

#[test]
fn errors_are_codes_with_the_libraries_sentence() {
    let mut bus = null_mut();
    let bad = c"transport = \"carrier-pigeon\"";
    // SAFETY: valid string and out pointer.
    let rc = unsafe { mdbus_bus_open_toml(bad.as_ptr(), &mut bus) };
    assert_eq!(rc, MDBUS_ERR_CONFIG);
    assert!(bus.is_null());
    assert!(
        last_error().contains("unknown variant `carrier-pigeon`"),
        "{}",
        last_error()
    );

    let missing = c"/nonexistent/mdbus.toml";
    // SAFETY: as above.
    let rc = unsafe { mdbus_bus_open_file(missing.as_ptr(), &mut bus) };
    assert_eq!(rc, MDBUS_ERR_CONFIG);
    assert!(
        last_error().contains("/nonexistent/mdbus.toml"),
        "{}",
        last_error()
    );
    // SAFETY: static storage.
    let name = unsafe { CStr::from_ptr(mdbus_error_name(rc)) };
    assert_eq!(name.to_str().unwrap(), "MDBUS_ERR_CONFIG");

    // SAFETY: null arguments are what is being tested.
    unsafe {
        assert_eq!(mdbus_bus_open_toml(null(), &mut bus), MDBUS_ERR_NULL);
        assert_eq!(
            mdbus_bus_open_toml(bad.as_ptr(), null_mut()),
            MDBUS_ERR_NULL
        );
        assert_eq!(
            mdbus_publisher_publish(null_mut(), null(), 0, null_mut()),
            MDBUS_ERR_NULL
        );
        assert!(last_error().contains("publisher handle is null"));
        assert_eq!(
            mdbus_subscriber_poll(null_mut(), Some(record), null_mut()),
            MDBUS_ERR_NULL
        );
        assert_eq!(
            mdbus_session_send(null_mut(), null(), 0, null_mut()),
            MDBUS_ERR_NULL
        );
        // Closing null is a no-op, like free(NULL).
        assert_eq!(mdbus_publisher_close(null_mut()), MDBUS_OK);
        assert_eq!(mdbus_bus_close(null_mut()), MDBUS_OK);
    }
}

#[test]
fn a_handle_of_another_type_is_refused() {
    let (bus, dir) = shm_bus("wrong-type");
    let mut publisher = null_mut();
    // SAFETY: valid handles and strings; the casts are the point of the test.
    unsafe {
        assert_eq!(
            mdbus_publisher_open(bus, c"md".as_ptr(), &mut publisher),
            MDBUS_OK
        );
        let as_sub = publisher.cast::<mdbus_subscriber>();
        assert_eq!(
            mdbus_subscriber_poll(as_sub, Some(record), null_mut()),
            MDBUS_ERR_INVALID_HANDLE
        );
        assert!(
            last_error().contains("not an open subscriber handle"),
            "{}",
            last_error()
        );
        let as_bus = publisher.cast::<mdbus_bus>();
        assert_eq!(mdbus_bus_close(as_bus), MDBUS_ERR_INVALID_HANDLE);
        assert!(mdbus_bus_transport(as_bus).is_null());
        assert_eq!(
            CStr::from_ptr(mdbus_bus_transport(bus)).to_str().unwrap(),
            "shm"
        );
        assert_eq!(mdbus_publisher_close(publisher), MDBUS_OK);
        assert_eq!(mdbus_bus_close(bus), MDBUS_OK);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn misuse_of_claims_and_sizes_is_an_error_not_a_crash() {
    let (bus, dir) = shm_bus("misuse");
    let mut p = null_mut();
    let mut buf = null_mut();
    let mut seq = 0u64;
    // SAFETY: valid handles, strings and out pointers.
    unsafe {
        assert_eq!(mdbus_publisher_open(bus, c"md".as_ptr(), &mut p), MDBUS_OK);
        assert_eq!(
            mdbus_publisher_commit(p, &mut seq),
            MDBUS_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("commit without a claim"));
        assert_eq!(
            mdbus_publisher_claim(p, 65, &mut buf),
            MDBUS_ERR_MESSAGE_TOO_LARGE
        );
        assert!(last_error().contains("65-byte message"), "{}", last_error());
        assert_eq!(mdbus_publisher_claim(p, 8, null_mut()), MDBUS_ERR_NULL);
        assert_eq!(mdbus_publisher_claim(p, 8, &mut buf), MDBUS_OK);
        assert_eq!(
            mdbus_publisher_commit_len(p, 9, &mut seq),
            MDBUS_ERR_INVALID_ARGUMENT
        );
        // The failed commit consumed the claim: publishing nothing.
        assert_eq!(
            mdbus_publisher_commit(p, &mut seq),
            MDBUS_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            mdbus_publisher_publish(p, null(), 3, &mut seq),
            MDBUS_ERR_NULL
        );
        assert_eq!(mdbus_publisher_publish(p, null(), 0, &mut seq), MDBUS_OK);
        assert_eq!(seq, 1);
        let mut sub = null_mut();
        assert_eq!(
            mdbus_subscriber_open(bus, c"bad name!".as_ptr(), &mut sub),
            MDBUS_ERR_BAD_NAME
        );
        assert_eq!(
            mdbus_subscriber_open(bus, c"md".as_ptr(), &mut sub),
            MDBUS_OK
        );
        assert_eq!(mdbus_subscriber_poll(sub, None, null_mut()), MDBUS_ERR_NULL);
        mdbus_subscriber_close(sub);
        mdbus_publisher_close(p);
        mdbus_bus_close(bus);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn every_stream_event_reaches_the_callback() {
    let (bus, dir) = shm_bus("events");
    let (mut p, mut sub, mut buf) = (null_mut(), null_mut(), null_mut());
    let mut seq = 0u64;
    let mut seen = Seen::default();
    let ctx = (&mut seen as *mut Seen).cast::<c_void>();
    // SAFETY: valid handles, strings, out pointers and callback context.
    unsafe {
        assert_eq!(mdbus_publisher_open(bus, c"md".as_ptr(), &mut p), MDBUS_OK);
        assert_eq!(
            mdbus_subscriber_open(bus, c"md".as_ptr(), &mut sub),
            MDBUS_OK
        );
        // Zero copy: claim 16, write 5, commit 5.
        assert_eq!(mdbus_publisher_claim(p, 16, &mut buf), MDBUS_OK);
        std::ptr::copy_nonoverlapping(b"hello".as_ptr(), buf, 5);
        assert_eq!(mdbus_publisher_commit_len(p, 5, &mut seq), MDBUS_OK);
        assert_eq!(seq, 1);
        assert_eq!(
            mdbus_publisher_publish(p, b"world".as_ptr(), 5, &mut seq),
            MDBUS_OK
        );
        assert_eq!(mdbus_subscriber_poll(sub, Some(record), ctx), 2);
        // An overrun: 1024 retained, 1100 published past the reader.
        for _ in 0..1100 {
            mdbus_publisher_publish(p, b"x".as_ptr(), 1, &mut seq);
        }
        while mdbus_subscriber_poll(sub, Some(record), ctx) > 0 {}
        let mut st = mdbus_subscriber_counters::default();
        assert_eq!(mdbus_subscriber_stats(sub, &mut st), MDBUS_OK);
        assert_eq!(st.received + st.overrun_messages, 1102);
        assert_eq!(st.overruns, 1);
        let mut pst = mdbus_publisher_counters::default();
        assert_eq!(mdbus_publisher_stats(p, &mut pst), MDBUS_OK);
        assert_eq!(
            (pst.published, pst.next_seq, pst.max_message),
            (1102, 1103, 64)
        );
        // End of stream after the publisher closes.
        assert_eq!(mdbus_publisher_close(p), MDBUS_OK);
        let before = seen.events.len();
        while seen.events.len() == before
            || seen.events.last().unwrap().0 != MDBUS_EVENT_END_OF_STREAM
        {
            assert!(mdbus_subscriber_poll(sub, Some(record), ctx) >= 0);
        }
        mdbus_subscriber_close(sub);
        mdbus_bus_close(bus);
    }
    let e = &seen.events;
    assert_eq!(
        e[0],
        (MDBUS_EVENT_MESSAGE, 1, b"hello".to_vec(), 0, 0, 0, true)
    );
    assert_eq!(
        e[1],
        (MDBUS_EVENT_MESSAGE, 2, b"world".to_vec(), 0, 0, 0, true)
    );
    let overruns: Vec<_> = e.iter().filter(|x| x.0 == MDBUS_EVENT_OVERRUN).collect();
    assert_eq!(overruns.len(), 1);
    assert!(overruns[0].3 == 3 && overruns[0].4 > 3, "{:?}", overruns[0]);
    let last = e.last().unwrap();
    assert_eq!((last.0, last.1), (MDBUS_EVENT_END_OF_STREAM, 1102));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn sessions_claim_send_poll_and_see_the_peer_close() {
    let (bus, dir) = shm_bus("session");
    let bus_addr = bus as usize;
    let acceptor = std::thread::spawn(move || {
        let mut s = null_mut();
        // SAFETY: the bus may be shared between threads; valid strings.
        let rc = unsafe { mdbus_session_accept(bus_addr as *mut mdbus_bus, c"o".as_ptr(), &mut s) };
        (rc, s as usize)
    });
    let mut client = null_mut();
    let mut buf = null_mut();
    let mut seq = 0;
    // SAFETY: valid handles, strings and out pointers throughout.
    unsafe {
        assert_eq!(
            mdbus_session_connect(bus, c"o".as_ptr(), &mut client),
            MDBUS_OK
        );
        let (rc, server) = acceptor.join().unwrap();
        assert_eq!(rc, MDBUS_OK);
        let server = server as *mut mdbus_session;
        assert_eq!(mdbus_session_claim(client, 10, &mut buf), MDBUS_OK);
        std::ptr::copy_nonoverlapping(b"buy".as_ptr(), buf, 3);
        assert_eq!(mdbus_session_commit(client, 3, &mut seq), MDBUS_OK);
        assert_eq!(seq, 1);
        assert_eq!(mdbus_session_try_claim(client, 4, &mut buf), 1);
        std::ptr::copy_nonoverlapping(b"sell".as_ptr(), buf, 4);
        assert_eq!(mdbus_session_commit(client, 4, &mut seq), MDBUS_OK);
        assert_eq!(
            mdbus_session_send(client, b"cancel".as_ptr(), 6, &mut seq),
            MDBUS_OK
        );
        assert_eq!(seq, 3);
        let mut seen = Seen::default();
        let ctx = (&mut seen as *mut Seen).cast::<c_void>();
        while seen.events.len() < 3 {
            assert!(mdbus_session_poll(server, Some(record), ctx) >= 0);
        }
        let got: Vec<_> = seen
            .events
            .iter()
            .map(|e| (e.0, e.1, e.2.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (MDBUS_EVENT_MESSAGE, 1, b"buy".to_vec()),
                (MDBUS_EVENT_MESSAGE, 2, b"sell".to_vec()),
                (MDBUS_EVENT_MESSAGE, 3, b"cancel".to_vec()),
            ]
        );
        let mut st = mdbus_session_counters::default();
        assert_eq!(mdbus_session_stats(client, &mut st), MDBUS_OK);
        assert_eq!((st.sent, st.received), (3, 0));
        assert_eq!(mdbus_session_close(client), MDBUS_OK);
        let rc = loop {
            let rc = mdbus_session_poll(server, Some(record), ctx);
            if rc != 0 {
                break rc;
            }
        };
        assert_eq!(rc, MDBUS_ERR_PEER_CLOSED);
        assert!(last_error().contains("closed"), "{}", last_error());
        mdbus_session_close(server);
        mdbus_bus_close(bus);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_c_hot_path_allocates_nothing() {
    let (bus, dir) = shm_bus("zero-alloc");
    let (mut p, mut sub, mut buf) = (null_mut(), null_mut(), null_mut());
    let mut bytes = 0u64;
    let ctx = (&mut bytes as *mut u64).cast::<c_void>();
    let mut seq = 0;
    // SAFETY: valid handles, out pointers and callback context.
    unsafe {
        assert_eq!(mdbus_publisher_open(bus, c"md".as_ptr(), &mut p), MDBUS_OK);
        assert_eq!(
            mdbus_subscriber_open(bus, c"md".as_ptr(), &mut sub),
            MDBUS_OK
        );
        let mut trip = |i: u64| {
            assert_eq!(mdbus_publisher_claim(p, 32, &mut buf), MDBUS_OK);
            buf.cast::<[u8; 8]>().write(i.to_le_bytes());
            assert_eq!(mdbus_publisher_commit(p, &mut seq), MDBUS_OK);
            assert_eq!(
                mdbus_publisher_publish(p, b"0123456789".as_ptr(), 10, &mut seq),
                MDBUS_OK
            );
            assert_eq!(mdbus_subscriber_poll(sub, Some(count), ctx), 2);
        };
        for i in 0..1000 {
            trip(i);
        }
        let before = allocs();
        for i in 0..200_000 {
            trip(i);
        }
        assert_eq!(allocs() - before, 0, "the C hot path allocated");
        assert_eq!(bytes, 201_000 * 42);
        mdbus_subscriber_close(sub);
        mdbus_publisher_close(p);
        mdbus_bus_close(bus);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_panic_becomes_an_error_code_not_an_unwind() {
    let rc = crate::errors::guard(|| panic!("deliberate"));
    assert_eq!(rc, MDBUS_ERR_PANIC);
    assert!(last_error().contains("deliberate"), "{}", last_error());
}
