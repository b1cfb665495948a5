//! Receive matching: posted receives and unexpected messages, both in arrival
//! order, under one lock. A message matches the first posted receive whose
//! filter takes it, else waits in `unexpected`; a new receive takes the first
//! unexpected message it matches, else is posted. Both queues keep their
//! order, so messages of one (sender, tag) are received in the order sent.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};

use crate::abi::StatePage;

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub src: usize,
    pub tag: i32,
    pub data: Vec<u8>,
}

/// A posted receive: its filter and, once matched, its message.
pub struct RecvSlot {
    pub src: Option<usize>,
    pub tag: Option<i32>,
    /// Set (Release) once `msg` is filled: spinning readers poll it without the lock.
    pub done: AtomicBool,
    /// A thread is blocked on this slot: its match clears `blocked_since_ns`.
    pub waiting: AtomicBool,
    pub msg: Mutex<Option<Msg>>,
}

impl RecvSlot {
    pub fn new(src: Option<usize>, tag: Option<i32>) -> Arc<RecvSlot> {
        Arc::new(RecvSlot {
            src,
            tag,
            done: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            msg: Mutex::new(None),
        })
    }

    /// Any-tag receives see user tags only: collectives use negative tags.
    pub fn matches(&self, src: usize, tag: i32) -> bool {
        self.src.is_none_or(|s| s == src) && self.tag.map_or(tag >= 0, |t| t == tag)
    }
}

#[derive(Default)]
pub struct Mailbox {
    pub unexpected: VecDeque<Msg>,
    posted: VecDeque<Arc<RecvSlot>>,
}

impl Mailbox {
    /// Progress thread: place an arrived message. Returns the slot it
    /// completed, if any (the caller wakes waiters). Counts the message as
    /// delivered: it is in this rank's buffers now.
    pub fn deliver(&mut self, msg: Msg, state: &StatePage) -> Option<Arc<RecvSlot>> {
        let s = state.layout();
        match self
            .posted
            .iter()
            .position(|slot| slot.matches(msg.src, msg.tag))
        {
            Some(i) => {
                let slot = self.posted.remove(i).expect("position is in range");
                *slot.msg.lock().unwrap() = Some(msg);
                slot.done.store(true, SeqCst);
                // Clear the waiter's blocked mark before counting the message, so
                // an agent that reads `delivered` first never sees the new count
                // beside a rank still marked blocked on it.
                if slot.waiting.load(SeqCst) {
                    s.blocked_since_ns.store(0, SeqCst);
                }
                s.delivered.fetch_add(1, SeqCst);
                Some(slot)
            }
            None => {
                self.unexpected.push_back(msg);
                s.delivered.fetch_add(1, SeqCst);
                None
            }
        }
    }

    /// Put back messages restored from a saved context (already counted as
    /// delivered when they first arrived). They are older than anything that
    /// can be queued now, so they go through matching first, in order.
    pub fn restore(&mut self, msgs: Vec<Msg>) -> Vec<Arc<RecvSlot>> {
        let mut woken = Vec::new();
        let mut keep = VecDeque::with_capacity(msgs.len() + self.unexpected.len());
        for msg in msgs {
            match self
                .posted
                .iter()
                .position(|slot| slot.matches(msg.src, msg.tag))
            {
                Some(i) => {
                    let slot = self.posted.remove(i).expect("position is in range");
                    *slot.msg.lock().unwrap() = Some(msg);
                    slot.done.store(true, SeqCst);
                    woken.push(slot);
                }
                None => keep.push_back(msg),
            }
        }
        keep.extend(self.unexpected.drain(..));
        self.unexpected = keep;
        woken
    }

    /// API thread: post a receive, completing it at once from `unexpected` if it can.
    pub fn post(&mut self, slot: &Arc<RecvSlot>) {
        match self
            .unexpected
            .iter()
            .position(|m| slot.matches(m.src, m.tag))
        {
            Some(i) => {
                *slot.msg.lock().unwrap() = self.unexpected.remove(i);
                slot.done.store(true, SeqCst);
            }
            None => self.posted.push_back(slot.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(src: usize, tag: i32, b: u8) -> Msg {
        Msg {
            src,
            tag,
            data: vec![b],
        }
    }

    #[test]
    fn matching_keeps_per_sender_tag_order_and_respects_filters() {
        let state = StatePage::anonymous().unwrap();
        let mut mb = Mailbox::default();
        for (i, (src, tag)) in [(1, 5), (2, 5), (1, 6), (1, 5), (3, -2)]
            .into_iter()
            .enumerate()
        {
            assert!(mb.deliver(msg(src, tag, i as u8), &state).is_none());
        }
        assert_eq!(state.snapshot().delivered, 5);
        let take = |mb: &mut Mailbox, src, tag| {
            let s = RecvSlot::new(src, tag);
            mb.post(&s);
            let got = s.msg.lock().unwrap().take();
            got.map(|m| m.data[0])
        };
        assert_eq!(take(&mut mb, Some(1), Some(5)), Some(0));
        assert_eq!(take(&mut mb, None, Some(5)), Some(1));
        assert_eq!(take(&mut mb, Some(1), None), Some(2));
        assert_eq!(take(&mut mb, None, None), Some(3));
        // The negative (collective) tag is invisible to an any-tag receive.
        assert_eq!(take(&mut mb, None, None), None);
        assert_eq!(take(&mut mb, Some(3), Some(-2)), Some(4));
    }

    #[test]
    fn posted_receives_are_matched_in_post_order_and_clear_the_blocked_mark() {
        let state = StatePage::anonymous().unwrap();
        let mut mb = Mailbox::default();
        let a = RecvSlot::new(None, Some(1));
        let b = RecvSlot::new(Some(2), Some(1));
        mb.post(&a);
        mb.post(&b);
        b.waiting.store(true, SeqCst);
        state.layout().blocked_since_ns.store(99, SeqCst);
        assert!(Arc::ptr_eq(&mb.deliver(msg(2, 1, 7), &state).unwrap(), &a));
        assert_eq!(state.snapshot().blocked_since_ns, 99);
        assert!(Arc::ptr_eq(&mb.deliver(msg(2, 1, 8), &state).unwrap(), &b));
        assert_eq!(state.snapshot().blocked_since_ns, 0);
        assert_eq!(b.msg.lock().unwrap().as_ref().unwrap().data, vec![8]);
    }

    #[test]
    fn restored_messages_come_before_newer_ones() {
        let state = StatePage::anonymous().unwrap();
        let mut mb = Mailbox::default();
        let slot = RecvSlot::new(Some(1), Some(0));
        mb.post(&slot);
        mb.deliver(msg(1, 1, 9), &state);
        let woken = mb.restore(vec![msg(1, 0, 1), msg(1, 1, 2)]);
        assert_eq!(woken.len(), 1);
        assert_eq!(slot.msg.lock().unwrap().as_ref().unwrap().data, vec![1]);
        let order: Vec<u8> = mb.unexpected.iter().map(|m| m.data[0]).collect();
        assert_eq!(order, vec![2, 9]);
    }
}
