//! Reading the input ahead of the replay, on a thread of its own, so the
//! send loop never waits on the disk or decodes a capture.
//!
//! The loader fills chunks (one buffer of message bytes and one of
//! `(offset, position, length)` items) and hands them over a channel; the
//! send loop gives each back once replayed. Chunks are allocated up to a
//! memory budget and then reused, so a capture that fits the budget is
//! read completely before the replay starts, and a larger one streams
//! through the budget's worth of chunks.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::input::{Input, InputError, InputStats, Stopped};
use super::schedule::Scheduler;

/// How long a wait for the loader lasts before the signal flag and the
/// deadline are looked at again.
const WAKE_EVERY: Duration = Duration::from_millis(50);

/// Bytes of messages per chunk.
const CHUNK_BYTES: usize = 1 << 20;
/// Messages per chunk.
const CHUNK_ITEMS: usize = 1 << 15;
/// What one chunk costs: its bytes and its items.
const CHUNK_COST: usize = CHUNK_BYTES + CHUNK_ITEMS * std::mem::size_of::<Item>();

/// One message in a chunk.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// When it is due, in nanoseconds from the start of the replay.
    pub offset_ns: u64,
    start: u32,
    len: u32,
}

/// Messages read ahead, in order.
#[derive(Debug)]
pub struct Chunk {
    data: Vec<u8>,
    items: Vec<Item>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            data: Vec::with_capacity(CHUNK_BYTES),
            items: Vec::with_capacity(CHUNK_ITEMS),
        }
    }

    /// The messages.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The bytes of `item`.
    #[inline]
    pub fn message(&self, item: &Item) -> &[u8] {
        &self.data[item.start as usize..(item.start + item.len) as usize]
    }

    fn is_full(&self) -> bool {
        // A capture packet adds up to 64 KiB at once; room is left for it
        // (the vectors may still grow for a packet of tiny messages).
        self.data.len() + (1 << 16) > CHUNK_BYTES || self.items.len() >= CHUNK_ITEMS
    }
}

/// What the whole input held, once read to its end.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadEnd {
    /// The input's counters.
    pub stats: InputStats,
    /// Longest message.
    pub max_len: usize,
    /// Offset of the last message: the replay's length at its pace.
    pub span_ns: u64,
    /// Messages whose capture time went backwards.
    pub backwards: u64,
}

enum Loaded {
    Chunk(Chunk),
    End(LoadEnd),
    Failed(InputError),
}

/// The loading thread and its channels.
pub struct Loader {
    name: String,
    rx: Receiver<Loaded>,
    free: Sender<Chunk>,
    thread: Option<JoinHandle<()>>,
    queued: VecDeque<Chunk>,
    max_chunks: usize,
    end: Option<LoadEnd>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("queued", &self.queued.len())
            .field("max_chunks", &self.max_chunks)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl Loader {
    /// Starts reading `input` with `schedule`, holding at most
    /// `budget_bytes` of chunks (at least two).
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(
        mut input: Input,
        mut schedule: Scheduler,
        budget_bytes: usize,
    ) -> std::io::Result<Loader> {
        let max_chunks = (budget_bytes / CHUNK_COST).max(2);
        let name = input.name().to_owned();
        let (tx, rx) = mpsc::channel();
        let (free, free_rx) = mpsc::channel::<Chunk>();
        let thread = std::thread::Builder::new()
            .name("replay-loader".into())
            .spawn(move || {
                let mut created = 0;
                let mut max_len = 0;
                let mut last_offset = 0;
                loop {
                    let mut chunk = match free_rx.try_recv() {
                        Ok(c) => c,
                        Err(_) if created < max_chunks => {
                            created += 1;
                            Chunk::new()
                        }
                        Err(_) => match free_rx.recv() {
                            Ok(c) => c,
                            // The replay is over (or failed): stop reading.
                            Err(_) => return,
                        },
                    };
                    chunk.data.clear();
                    chunk.items.clear();
                    let mut more = true;
                    while more && !chunk.is_full() {
                        let result = input.next_unit(|t, m| {
                            let offset_ns = schedule.offset(t);
                            let start = chunk.data.len() as u32;
                            chunk.data.extend_from_slice(m);
                            chunk.items.push(Item {
                                offset_ns,
                                start,
                                len: m.len() as u32,
                            });
                            max_len = max_len.max(m.len());
                            last_offset = offset_ns;
                        });
                        match result {
                            Ok(m) => more = m,
                            Err(e) => {
                                let _ = tx.send(Loaded::Failed(e));
                                return;
                            }
                        }
                    }
                    if !chunk.items.is_empty() && tx.send(Loaded::Chunk(chunk)).is_err() {
                        return;
                    }
                    if !more {
                        let end = input.finish().map(|stats| LoadEnd {
                            stats,
                            max_len,
                            span_ns: last_offset,
                            backwards: schedule.backwards(),
                        });
                        let _ = tx.send(match end {
                            Ok(end) => Loaded::End(end),
                            Err(e) => Loaded::Failed(e),
                        });
                        return;
                    }
                }
            })?;
        Ok(Loader {
            name,
            rx,
            free,
            thread: Some(thread),
            queued: VecDeque::new(),
            max_chunks,
            end: None,
        })
    }

    /// Waits until the whole input is read or the budget is full; returns
    /// what the whole input held when it was read to its end.
    ///
    /// # Errors
    /// The input is broken before that point, or SIGINT/SIGTERM arrived
    /// or `deadline` passed while waiting ([`InputError::Stopped`]).
    pub fn prime(&mut self, deadline: Option<Instant>) -> Result<Option<LoadEnd>, InputError> {
        while self.end.is_none() && self.queued.len() < self.max_chunks {
            match self.recv(deadline)? {
                Ok(Loaded::Chunk(c)) => self.queued.push_back(c),
                Ok(Loaded::End(end)) => self.end = Some(end),
                Ok(Loaded::Failed(e)) => return Err(e),
                Err(_) => break,
            }
        }
        Ok(self.end)
    }

    /// The next chunk in order (waiting for the loader if it is behind),
    /// or `None` after the last.
    ///
    /// # Errors
    /// The input turned out broken further on, or SIGINT/SIGTERM arrived
    /// or `deadline` passed while waiting ([`InputError::Stopped`]).
    pub fn next_chunk(&mut self, deadline: Option<Instant>) -> Result<Option<Chunk>, InputError> {
        if let Some(c) = self.queued.pop_front() {
            return Ok(Some(c));
        }
        if self.end.is_some() {
            return Ok(None);
        }
        match self.recv(deadline)? {
            Ok(Loaded::Chunk(c)) => Ok(Some(c)),
            Ok(Loaded::End(end)) => {
                self.end = Some(end);
                Ok(None)
            }
            Ok(Loaded::Failed(e)) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// Waits for the loader's next word, waking now and then for a signal
    /// or the deadline (a stalled pipe must not hold the replay).
    fn recv(&mut self, deadline: Option<Instant>) -> Result<Result<Loaded, ()>, InputError> {
        loop {
            let why = if mdbus_tool_support::signals::requested() {
                Some(Stopped::Signal)
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                Some(Stopped::Deadline)
            } else {
                None
            };
            if let Some(why) = why {
                return Err(InputError::Stopped {
                    name: self.name.clone(),
                    why,
                });
            }
            match self.rx.recv_timeout(WAKE_EVERY) {
                Ok(l) => return Ok(Ok(l)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(Err(())),
            }
        }
    }

    /// Hands a replayed chunk back for reuse.
    pub fn recycle(&self, chunk: Chunk) {
        let _ = self.free.send(chunk);
    }

    /// What the input held, once read to its end.
    pub fn end(&self) -> Option<LoadEnd> {
        self.end
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Closing the free list ends a loader waiting for a chunk; one
        // still reading stops at its next send.
        let (dead, _) = mpsc::channel();
        self.free = dead;
        self.queued.clear();
        while self.rx.try_recv().is_ok() {}
        if let Some(t) = self.thread.take() {
            // Detached if it is still inside a long read: it exits on its
            // next send, and the process is about to end anyway.
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
