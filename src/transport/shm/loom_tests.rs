//! Model checks of the broadcast and SPSC rings under loom, which runs the
//! ring code through every interleaving (and every value a weak load may
//! return) within a preemption bound.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p mdbus --release --lib loom_tests`
//!
//! The rings are tiny (two slots of one payload word) so that a few messages
//! already lap them, which is where ordering bugs live. Each payload word and
//! header is derived from the sequence number, so a message stitched from two
//! writes shows as a mismatch.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering as StdOrdering};

use loom::model::Builder;
use loom::sync::Arc;
use loom::thread;

use super::broadcast::{copy_in, Read, Reader, RingRef, Writer};
use super::spsc::{Consumer, PeekError, Peeked, Producer};
use crate::sync::AtomicU64;
use crate::wire::HEADER_WORDS;

/// Slots per ring.
const CAP: u64 = 2;
/// Header plus one payload word.
const WORDS_PER_SLOT: usize = HEADER_WORDS + 1;
/// Payload bytes per message: the whole slot.
const LEN: u32 = 8;

/// The payload of message `seq`: every byte equal to `seq`.
fn pattern(seq: u64) -> u64 {
    seq.wrapping_mul(0x0101_0101_0101_0101)
}

/// The timestamp of message `seq`; its flags are `seq` as well.
fn stamp(seq: u64) -> u64 {
    seq * 1000
}

/// Runs `f` under loom with at most `bound` preemptions per execution (none:
/// exhaustive). `LOOM_MAX_PREEMPTIONS` overrides the bound for a deeper run.
fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = Builder::new();
    b.preemption_bound = b.preemption_bound.or(bound);
    b.check(f);
}

/// Bound for the broadcast models: exhaustive exploration takes far longer,
/// and every ordering bug tried against them already fails at a bound of 1.
const BROADCAST_BOUND: Option<usize> = Some(3);

/// Ring memory for one execution, owned jointly by the threads using it so
/// it outlives every writer, reader, producer and consumer pointing into it.
struct Mem {
    words: Box<[AtomicU64]>,
    /// Broadcast tail or SPSC head.
    index: AtomicU64,
}

impl Mem {
    fn new() -> Arc<Mem> {
        Arc::new(Mem {
            words: (0..CAP as usize * WORDS_PER_SLOT)
                .map(|_| AtomicU64::new(0))
                .collect(),
            index: AtomicU64::new(0),
        })
    }

    fn ring(&self) -> RingRef {
        RingRef {
            slots: self.words.as_ptr(),
            mask: CAP - 1,
            words_per_slot: WORDS_PER_SLOT,
        }
    }
}

/// A writer together with the memory it points into, so the memory travels
/// with it to another thread.
struct OwnedWriter {
    w: Writer,
    _mem: Arc<Mem>,
}

impl OwnedWriter {
    fn new(mem: &Arc<Mem>) -> OwnedWriter {
        OwnedWriter {
            // SAFETY: `_mem` keeps the ring and tail alive as long as the
            // writer, and each model creates exactly one writer.
            w: unsafe { Writer::new(mem.ring(), &mem.index) },
            _mem: mem.clone(),
        }
    }

    /// Publishes the next message.
    fn publish(&mut self) {
        let seq = self.w.next_seq();
        let dst = self.w.claim();
        // SAFETY: `dst` is the payload of the slot just claimed and 8 bytes
        // fill it exactly.
        unsafe { copy_in(dst, &pattern(seq).to_le_bytes()) };
        assert_eq!(self.w.commit(LEN, seq as u32, stamp(seq)), seq);
    }
}

/// What one broadcast reader has accounted for: every sequence below `next`
/// was either read whole or reported lost in an overrun.
struct Account {
    next: u64,
    /// Messages the writer publishes in this model.
    total: u64,
    overruns: u32,
}

impl Account {
    fn new(total: u64) -> Account {
        Account {
            next: 1,
            total,
            overruns: 0,
        }
    }

    fn done(&self) -> bool {
        self.next > self.total
    }

    /// Checks one read; false when there was nothing new.
    fn take(&mut self, read: Read, buf: &[u8; 8]) -> bool {
        match read {
            Read::Message {
                seq,
                len,
                flags,
                timestamp,
            } => {
                assert_eq!(seq, self.next, "sequence skipped or repeated");
                assert_eq!(
                    (len, flags, timestamp),
                    (LEN, seq as u32, stamp(seq)),
                    "header of {seq} mixed with another message"
                );
                assert_eq!(
                    u64::from_le_bytes(*buf),
                    pattern(seq),
                    "payload of {seq} torn or mixed"
                );
                self.next = seq + 1;
                true
            }
            Read::Overrun { from, to } => {
                assert_eq!(from, self.next, "overrun does not start at the cursor");
                assert!(
                    from < to && to <= self.total + 1,
                    "bad overrun {from}..{to}"
                );
                // Only a claim of `from + CAP` can overwrite `from`'s slot.
                assert!(
                    from + CAP <= self.total,
                    "overrun at {from}, whose slot was never reused"
                );
                self.next = to;
                self.overruns += 1;
                true
            }
            Read::Empty => false,
            Read::Corrupt { seq, word, value } => {
                panic!("slot of {seq} reported corrupt: {word} {value}")
            }
        }
    }

    /// Reads until every published sequence is accounted for.
    fn read_all(&mut self, rd: &mut Reader) {
        while !self.done() {
            let mut buf = [0u8; 8];
            let read = rd.read(&mut buf);
            if !self.take(read, &buf) {
                thread::yield_now();
            }
        }
    }
}

/// A reader created while the writer runs sees every message whole, in
/// order, and loses a message only if the writer really overwrote it.
#[test]
fn broadcast_reader_sees_whole_messages_in_order() {
    const TOTAL: u64 = 3;
    model(BROADCAST_BOUND, || {
        let mem = Mem::new();
        let mut w = OwnedWriter::new(&mem);
        let writer = thread::spawn(move || {
            for _ in 0..TOTAL {
                w.publish();
            }
        });
        // SAFETY: `mem` lives until the end of the closure, past the reader.
        let mut rd = unsafe { Reader::new(mem.ring(), &mem.index, 1) };
        let mut acc = Account::new(TOTAL);
        acc.read_all(&mut rd);
        writer.join().unwrap();
        assert_eq!(rd.read(&mut [0u8; 8]), Read::Empty);
    });
}

/// The writer overwrites slots while the reader copies them out: the reader
/// either gets the whole message or learns it was overrun, never a mix.
#[test]
fn broadcast_lapped_reader_never_returns_a_mixed_message() {
    const TOTAL: u64 = 4;
    static SAW_OVERRUN: StdAtomicBool = StdAtomicBool::new(false);
    static SAW_RACED_MESSAGE: StdAtomicBool = StdAtomicBool::new(false);
    model(BROADCAST_BOUND, || {
        let mem = Mem::new();
        let mut w = OwnedWriter::new(&mem);
        // Fill the ring first, so every concurrent publish overwrites a slot
        // the reader has still to read.
        for _ in 0..CAP {
            w.publish();
        }
        let writer = thread::spawn(move || {
            for _ in CAP..TOTAL {
                w.publish();
            }
        });
        // SAFETY: `mem` lives until the end of the closure, past the reader.
        let mut rd = unsafe { Reader::new(mem.ring(), &mem.index, 1) };
        let mut acc = Account::new(TOTAL);
        // The first read races with the overwrite of its slot; afterwards
        // read what is left.
        let mut buf = [0u8; 8];
        let read = rd.read(&mut buf);
        if matches!(read, Read::Message { .. }) {
            SAW_RACED_MESSAGE.store(true, StdOrdering::Relaxed);
        }
        acc.take(read, &buf);
        acc.read_all(&mut rd);
        writer.join().unwrap();
        if acc.overruns > 0 {
            SAW_OVERRUN.store(true, StdOrdering::Relaxed);
        }
    });
    // The model must have reached both outcomes of the race.
    assert!(SAW_OVERRUN.load(StdOrdering::Relaxed));
    assert!(SAW_RACED_MESSAGE.load(StdOrdering::Relaxed));
}

/// Checks a peeked message against its sequence, payload included.
fn check_peeked(m: &Peeked, want: u64) {
    assert_eq!(
        (m.seq, m.len, m.flags, m.timestamp),
        (want, LEN, want as u32, stamp(want)),
        "header of {want} wrong"
    );
    // A plain read, as the consumer's borrowed view makes in production:
    // loom reports a causality violation unless the producer's write of
    // this message happens-before it and its next write of the slot
    // happens-after it.
    // SAFETY: a peeked payload is one word of ring memory, valid and not
    // written by the producer until release (the property under test).
    let payload = unsafe { (*m.payload).unsync_load() };
    assert_eq!(payload, pattern(want), "payload of {want} wrong");
}

/// Three messages through two slots: the consumer gets them in order and
/// intact, the producer is refused only when the ring is full, and it never
/// writes a slot the consumer has not released.
#[test]
fn spsc_delivers_in_order_and_never_reuses_an_unreleased_slot() {
    const TOTAL: u64 = 3;
    static SAW_FULL: StdAtomicBool = StdAtomicBool::new(false);
    // Small enough to explore exhaustively.
    model(None, || {
        let mem = Mem::new();
        let m = mem.clone();
        let producer = thread::spawn(move || {
            // SAFETY: `m` keeps the fresh ring and head alive past the
            // producer's last use here; the main thread keeps them alive
            // for the producer it gets back. One producer per model.
            let mut p = unsafe { Producer::new(m.ring(), &m.index) };
            for seq in 1..=TOTAL {
                let dst = loop {
                    match p.try_claim() {
                        Some(dst) => break dst,
                        None => {
                            assert!(
                                seq > CAP && p.in_flight() == CAP,
                                "refused seq {seq} with {} in flight",
                                p.in_flight()
                            );
                            SAW_FULL.store(true, StdOrdering::Relaxed);
                            thread::yield_now();
                        }
                    }
                };
                // SAFETY: `dst` is the claimed slot's payload and 8 bytes
                // fill it exactly.
                unsafe { copy_in(dst, &pattern(seq).to_le_bytes()) };
                assert_eq!(p.commit(LEN, seq as u32, stamp(seq)), seq);
            }
            p
        });
        // SAFETY: `mem` lives until the end of the closure, past the
        // consumer; one consumer per model.
        let mut c = unsafe { Consumer::new(mem.ring(), &mem.index) };
        for want in 1..=TOTAL {
            let m = loop {
                match c.peek() {
                    Ok(m) => break m,
                    Err(PeekError::Empty) => thread::yield_now(),
                    Err(e) => panic!("peek of {want}: {e:?}"),
                }
            };
            check_peeked(&m, want);
            // Look again just before handing the slot back: a producer that
            // reused it early would show here.
            check_peeked(&c.peek().expect("peeked message vanished"), want);
            c.release();
        }
        let mut p = producer.join().unwrap();
        assert_eq!(c.peek().unwrap_err(), PeekError::Empty);
        assert!(p.try_claim().is_some(), "all released, yet refused");
    });
    assert!(
        SAW_FULL.load(StdOrdering::Relaxed),
        "the full ring was never reached"
    );
}

/// The doorbell loses no wake-up: a registered reader that announced its
/// sleep and then found the ring empty sleeps on a bell value the writer
/// moves afterwards (so `FUTEX_WAIT` fails at once or is woken); otherwise
/// the writer's message was visible to the reader's look. Two messages and
/// two sleeps, so the second round starts from the state the first left
/// (flag taken down by the writer, or still up after a ready look).
/// The registration precedes the writer (the thread spawn orders it, as
/// `membarrier` does between processes; see `doorbell`).
#[test]
fn the_doorbell_loses_no_wake_up() {
    use super::doorbell::{Doorbell, Registration};
    use loom::sync::atomic::AtomicU32;

    struct Words {
        sleepers: AtomicU64,
        asleep: AtomicU64,
        bell: AtomicU32,
        tail: AtomicU64,
    }
    impl Words {
        fn doorbell(&self) -> Doorbell {
            // SAFETY: the words live in the Arc held by each user.
            unsafe { Doorbell::new(&self.sleepers, &self.asleep, &self.bell) }
        }
    }
    model(None, || {
        let w = Arc::new(Words {
            sleepers: AtomicU64::new(0),
            asleep: AtomicU64::new(0),
            bell: AtomicU32::new(0),
            tail: AtomicU64::new(1),
        });
        let mut reg = Registration::default();
        w.doorbell().register(&mut reg);
        let writer = {
            let w = Arc::clone(&w);
            thread::spawn(move || {
                for next in 2..=3 {
                    // The writer's commit: the tail with release, then the
                    // bell.
                    w.tail.store(next, crate::sync::Ordering::Release);
                    w.doorbell().ring();
                }
            })
        };
        // Each round: announce, look; an empty look means a sleep, which
        // the writer's later publish must be able to end.
        let mut pos = 1;
        let mut pending = Vec::new();
        for _ in 0..2 {
            let seen = w.doorbell().announce();
            let tail = w.tail.load(crate::sync::Ordering::Acquire);
            if tail != pos {
                pos = tail;
            } else if pos < 3 {
                pending.push(seen);
            }
        }
        writer.join().unwrap();
        for seen in pending {
            assert_ne!(
                w.bell.load(crate::sync::Ordering::Acquire),
                seen,
                "the reader would sleep on a bell nobody rings"
            );
        }
        w.doorbell().deregister(&mut reg);
        assert_eq!(w.sleepers.load(crate::sync::Ordering::Relaxed), 0);
    });
}

/// A writer that finds no registered sleeper does not fence, and a reader
/// that has not registered is not owed a wake-up: after deregistering, the
/// writer leaves the flag alone whatever the interleaving.
#[test]
fn an_unregistered_doorbell_is_left_alone() {
    use super::doorbell::Doorbell;
    use loom::sync::atomic::AtomicU32;

    model(None, || {
        let sleepers = Arc::new(AtomicU64::new(0));
        let asleep = Arc::new(AtomicU64::new(1));
        let bell = Arc::new(AtomicU32::new(0));
        let writer = {
            let (s, a, b) = (
                Arc::clone(&sleepers),
                Arc::clone(&asleep),
                Arc::clone(&bell),
            );
            thread::spawn(move || {
                // SAFETY: the words live in the Arcs this thread holds.
                unsafe { Doorbell::new(&*s, &*a, &*b) }.ring();
            })
        };
        writer.join().unwrap();
        assert_eq!(bell.load(crate::sync::Ordering::Relaxed), 0);
        assert_eq!(asleep.load(crate::sync::Ordering::Relaxed), 1);
    });
}
