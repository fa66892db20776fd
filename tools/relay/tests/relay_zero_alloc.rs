//! The relay's per-message path allocates nothing: after warm-up, a
//! counting global allocator watches arbitration (two lossy lines), routing
//! (Stock Directory learning included), publishing on shared memory,
//! latency recording and counters-file refreshes over a whole synthetic
//! session.

mod relay_common;

use mdbus::counters::CountersFile;
use mdbus_feed::arbiter::{Arbiter, ArbiterSink, Line};
use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
use mdbus_relay::ingest::{arbiter_config, Sink};
use mdbus_relay::pipeline::Pipeline;
use mdbus_relay::route::Router;
use mdbus_relay::stats::{self, Upstream};
use mdbus_relay::RelayConfig;
use relay_common::{Scratch, ROUTING};

#[global_allocator]
static A: mdbus_testkit::alloc::Counting = mdbus_testkit::alloc::Counting;

use mdbus_testkit::alloc::allocs;

#[test]
fn arbitrate_route_publish_and_count_allocate_nothing() {
    let scratch = Scratch::new("zalloc");
    let text = format!(
        "[input]\nline_a = \"239.1.1.1:5000\"\nstart_sequence = 1\n{}{ROUTING}",
        scratch.shm_bus(1 << 12)
    );
    let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
    let names = cfg.stream_names();
    let bus = mdbus::Bus::new(cfg.bus.clone()).unwrap();
    let publishers: Vec<_> = names.iter().map(|n| bus.publisher(n).unwrap()).collect();
    let mut pipeline = Pipeline::new(Router::new(&cfg.routing, &names), publishers, None);
    let mut arbiter = Arbiter::new(arbiter_config(&cfg.input, None));
    let labels = stats::labels(&names);
    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    let counters = CountersFile::create(scratch.path("counters"), "test", &refs).unwrap();

    // Two days: the first warms up, the second is counted.
    let day = |seed| {
        let g = Generator::new(&SynthConfig {
            seed,
            symbols: 30,
            order_messages: 50_000,
            ..SynthConfig::default()
        })
        .unwrap();
        let mut p =
            MoldPacker::new(g, Session::new(&format!("ZALLOC{seed}")).unwrap(), 1, 1400).unwrap();
        let mut v = Vec::new();
        while let Some(pk) = p.next_packet() {
            v.push(pk.bytes.to_vec());
        }
        v.push(p.end_of_session().to_vec());
        v
    };
    let warm = day(1);
    let counted = day(2);
    let mut request_errors = 0u64;
    let mut ended = false;
    let mut run =
        |packets: &[Vec<u8>], arbiter: &mut Arbiter, pipeline: &mut Pipeline, t: &mut u64| {
            for (i, p) in packets.iter().enumerate() {
                // B loses every 5th packet, A every 7th but never the same one.
                let lines: &[Line] = match (i % 7 == 3, i % 5 == 1) {
                    (true, _) => &[Line::B],
                    (false, true) => &[Line::A],
                    _ => &[Line::A, Line::B],
                };
                for &line in lines {
                    *t += 1_000;
                    pipeline.begin_packet(mdbus::clock::now_ns());
                    let mut sink = Sink {
                        pipeline: &mut *pipeline,
                        rerequest: None,
                        request_errors: &mut request_errors,
                        ended: &mut ended,
                    };
                    arbiter.on_packet(line, p, *t, &mut sink);
                    pipeline.end_packet();
                }
                if i % 1000 == 0 {
                    pipeline.publish_counters(&counters, &Upstream::from(arbiter.counters()), *t);
                }
            }
        };
    let mut t = 0u64;
    run(&warm, &mut arbiter, &mut pipeline, &mut t);
    let before_msgs = pipeline.local().messages_in;
    // A new session (the second day) follows the first in the same
    // arbiter: its Stock Directory messages fill the router's table again.
    let before = allocs();
    run(&counted, &mut arbiter, &mut pipeline, &mut t);
    let after = allocs();
    let delivered = pipeline.local().messages_in - before_msgs;
    assert!(
        delivered > 50_000,
        "the counted day was relayed ({delivered} messages)"
    );
    assert_eq!(arbiter.counters().unrecoverable, 0);
    assert_eq!(
        after - before,
        0,
        "{} allocations while relaying {delivered} messages",
        after - before
    );

    // An unrecoverable range becomes a source-gap notice on every stream,
    // through the arbiter's sink, without allocating either.
    let mut sink = Sink {
        pipeline: &mut pipeline,
        rerequest: None,
        request_errors: &mut request_errors,
        ended: &mut ended,
    };
    sink.unrecoverable(1, 5);
    let before = allocs();
    for i in 0..1000 {
        sink.unrecoverable(10 + i * 10, 5);
    }
    let after = allocs();
    assert_eq!(
        pipeline.local().source_gaps,
        1001 * names.len() as u64,
        "every range on every stream"
    );
    assert_eq!(after - before, 0, "allocations publishing source gaps");
}
