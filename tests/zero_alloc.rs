//! After warm-up, the send and receive paths allocate nothing: a counting
//! global allocator watches one million stream and session round trips.

#[global_allocator]
static A: mdbus_testkit::alloc::Counting = mdbus_testkit::alloc::Counting;

use mdbus_testkit::alloc::allocs;

const ROUND_TRIPS: u64 = 1_000_000;

fn bus() -> mdbus::Bus {
    let cfg = mdbus::Config::from_toml_str(
        &format!(
            "transport = \"shm\"\n[shm]\nprefix = \"mdbus-zalloc-{}\"\n\
             [streams.s]\nmax_message = 64\ntimestamps = true\n\
             [sessions.o]\nmax_message = 64\ntimestamps = true\n",
            std::process::id()
        ),
        "<test>",
    )
    .unwrap();
    mdbus::Bus::new(cfg).unwrap()
}

#[test]
fn one_million_round_trips_allocate_nothing() {
    let bus = bus();

    // Stream: publish, then poll it back.
    let mut p = bus.publisher("s").unwrap();
    let mut s = bus.subscriber("s").unwrap();
    let mut received = 0u64;
    let mut trip = |p: &mut mdbus::Publisher, s: &mut mdbus::Subscriber, i: u64| {
        let mut c = p.claim(32).unwrap();
        c[..8].copy_from_slice(&i.to_le_bytes());
        c.commit().unwrap();
        s.poll(|e| {
            if let mdbus::Event::Message(m) = e {
                assert_eq!(m.payload()[..8], i.to_le_bytes());
                assert!(m.timestamp().is_some());
                received += 1;
            }
        })
        .unwrap();
    };
    for i in 0..1000 {
        trip(&mut p, &mut s, i);
    }
    let before = allocs();
    for i in 0..ROUND_TRIPS {
        trip(&mut p, &mut s, i);
    }
    let stream_allocs = allocs() - before;

    // Session: a sends, b echoes, a receives.
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("o")
    });
    let mut b = bus.session_connect("o").unwrap();
    let mut a = acceptor.join().unwrap().unwrap();
    let mut echoed = 0u64;
    let mut session_trip = |a: &mut mdbus::Session, b: &mut mdbus::Session, i: u64| {
        a.send(&i.to_le_bytes()).unwrap();
        let mut got = [0u8; 8];
        while b.poll(|m| got.copy_from_slice(m.payload())).unwrap() == 0 {}
        b.send(&got).unwrap();
        let mut back = [0u8; 8];
        while a.poll(|m| back.copy_from_slice(m.payload())).unwrap() == 0 {}
        assert_eq!(u64::from_le_bytes(back), i);
        echoed += 1;
    };
    for i in 0..1000 {
        session_trip(&mut a, &mut b, i);
    }
    let before = allocs();
    for i in 0..ROUND_TRIPS {
        session_trip(&mut a, &mut b, i);
    }
    let session_allocs = allocs() - before;

    assert_eq!(received, ROUND_TRIPS + 1000);
    assert_eq!(echoed, ROUND_TRIPS + 1000);
    assert_eq!(stream_allocs, 0, "stream publish+poll allocated");
    assert_eq!(session_allocs, 0, "session send+poll allocated");
    // The counter works: a deliberate allocation is seen.
    let before = allocs();
    let v = std::hint::black_box(vec![1u8; 10]);
    assert_eq!(allocs() - before, 1);
    drop(v);
}
