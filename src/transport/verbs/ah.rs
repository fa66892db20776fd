//! Address handles for UD sends, and the small cache that keeps one per
//! peer so replies do not create a handle per datagram.

use std::ptr::NonNull;

use verbs_sys::{ibv_ah, ibv_ah_attr, Verbs};

use super::errors;
use super::pd::Pd;
use crate::error::Result;

/// An address handle; destroyed on drop (before its PD, and only once no
/// outstanding send uses it).
pub(crate) struct Ah {
    verbs: &'static Verbs,
    raw: NonNull<ibv_ah>,
}

impl Ah {
    /// Creates a handle for `attr`.
    ///
    /// # Safety
    /// `pd` must outlive the handle.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        pd: &Pd,
        attr: &mut ibv_ah_attr,
        device: &str,
    ) -> Result<Ah> {
        // SAFETY: the PD is live (caller); `attr` is a valid attribute set.
        let raw = unsafe { (verbs.ibv_create_ah)(pd.as_raw(), attr) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Ah { verbs, raw }),
            None => Err(errors::last("ibv_create_ah", device, None)),
        }
    }

    /// The raw pointer, for UD work requests.
    #[inline]
    pub(crate) fn as_raw(&self) -> *mut ibv_ah {
        self.raw.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once; the owner made
        // sure no outstanding request refers to it.
        unsafe { (self.verbs.ibv_destroy_ah)(self.raw.as_ptr()) };
    }
}

/// A fixed number of slots, each holding a handle `T` for a peer
/// `(gid, qpn)` and the number of the last send request that used it.
/// Allocated once; lookups are a linear scan (a few dozen peers at most:
/// retransmission requesters and servers).
pub(crate) struct AhCache<T> {
    slots: Box<[Option<Entry<T>>]>,
}

struct Entry<T> {
    gid: [u8; 16],
    qpn: u32,
    value: T,
    /// Send request that last used the handle; `None` if none did.
    last_use: Option<u64>,
}

impl<T> AhCache<T> {
    /// A cache of `n` slots.
    pub(crate) fn new(n: usize) -> AhCache<T> {
        AhCache {
            slots: (0..n.max(1)).map(|_| None).collect(),
        }
    }

    /// The slot holding `(gid, qpn)`.
    #[inline]
    pub(crate) fn find(&self, gid: &[u8; 16], qpn: u32) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|e| e.qpn == qpn && e.gid == *gid))
    }

    /// The handle in slot `i`, marked as used by send request `wr`.
    #[inline]
    pub(crate) fn use_slot(&mut self, i: usize, wr: u64) -> &T {
        let e = self.slots[i].as_mut().expect("occupied slot");
        e.last_use = Some(wr);
        &e.value
    }

    /// A slot for a new entry: an empty one, else the least recently used
    /// one whose last send has completed (`completed`: every request below
    /// this number is done). `Err(wr)` when every slot is still in use by
    /// an outstanding request; `wr` is the oldest such request, whose
    /// completion would free a slot.
    pub(crate) fn victim(&self, completed: u64) -> Result<usize, u64> {
        if let Some(i) = self.slots.iter().position(Option::is_none) {
            return Ok(i);
        }
        let mut best: Option<(usize, Option<u64>)> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let e = s.as_ref().expect("all occupied");
            if e.last_use.is_some_and(|w| w >= completed) {
                continue;
            }
            if best.map_or(true, |(_, b)| e.last_use < b) {
                best = Some((i, e.last_use));
            }
        }
        match best {
            Some((i, _)) => Ok(i),
            None => Err(self
                .slots
                .iter()
                .filter_map(|s| s.as_ref().and_then(|e| e.last_use))
                .min()
                .expect("all slots in use")),
        }
    }

    /// Puts `(gid, qpn) -> value` in slot `i`, dropping what was there.
    pub(crate) fn put(&mut self, i: usize, gid: [u8; 16], qpn: u32, value: T) {
        self.slots[i] = Some(Entry {
            gid,
            qpn,
            value,
            last_use: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(n: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[15] = n;
        g
    }

    #[test]
    fn finds_what_was_put() {
        let mut c = AhCache::new(2);
        let i = c.victim(0).unwrap();
        c.put(i, gid(1), 7, "a");
        assert_eq!(c.find(&gid(1), 7), Some(i));
        assert_eq!(c.find(&gid(1), 8), None);
        assert_eq!(c.find(&gid(2), 7), None);
        assert_eq!(*c.use_slot(i, 0), "a");
    }

    #[test]
    fn evicts_the_least_recently_used_completed_entry() {
        let mut c = AhCache::new(3);
        for n in 0..3u8 {
            let i = c.victim(0).unwrap();
            c.put(i, gid(n), 1, n);
        }
        let (a, b, d) = (
            c.find(&gid(0), 1).unwrap(),
            c.find(&gid(1), 1).unwrap(),
            c.find(&gid(2), 1).unwrap(),
        );
        c.use_slot(a, 5);
        c.use_slot(b, 3);
        c.use_slot(d, 9);
        // Requests below 6 are complete: b (3) is older than a (5).
        assert_eq!(c.victim(6), Ok(b));
        // Only requests below 4 are complete: b is the only free one.
        assert_eq!(c.victim(4), Ok(b));
        // Nothing complete: the oldest outstanding use is reported.
        assert_eq!(c.victim(0), Err(3));
    }

    #[test]
    fn a_never_used_entry_is_evicted_first() {
        let mut c = AhCache::new(2);
        c.put(0, gid(0), 1, 0);
        c.put(1, gid(1), 1, 1);
        c.use_slot(0, 0);
        assert_eq!(c.victim(1), Ok(1));
    }
}
