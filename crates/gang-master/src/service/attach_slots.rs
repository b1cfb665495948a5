//! How many Attach streams each user holds open. Each costs the master a relay task and a
//! few pieces of output in flight (`output::READ_MAX`), and an open log file; a user who
//! opens streams and never reads them must run out of their own allowance, not of the
//! master's memory. Admins are not counted: they must be able to look at any job.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::MasterError;
use crate::state::events::Caller;

#[derive(Debug)]
pub struct AttachSlots {
    per_user: usize,
    open: Mutex<HashMap<u32, usize>>,
}

/// One open Attach stream; its slot is given back when the stream's relay ends.
#[derive(Debug)]
pub struct AttachSlot {
    slots: Arc<AttachSlots>,
    uid: Option<u32>,
}

impl AttachSlots {
    pub fn new(per_user: usize) -> Arc<Self> {
        Arc::new(AttachSlots {
            per_user,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for `caller`, or an error naming the limit.
    pub fn take(self: &Arc<Self>, caller: &Caller) -> Result<AttachSlot, MasterError> {
        if caller.admin {
            return Ok(AttachSlot {
                slots: self.clone(),
                uid: None,
            });
        }
        let uid = caller.owner.uid;
        let mut open = self.open.lock().expect("attach slots lock");
        let n = open.entry(uid).or_default();
        if *n >= self.per_user {
            return Err(MasterError::TooManyAttaches {
                user: caller.owner.user.clone(),
                open: *n,
                limit: self.per_user,
            });
        }
        *n += 1;
        Ok(AttachSlot {
            slots: self.clone(),
            uid: Some(uid),
        })
    }

    /// Streams `uid` holds open now.
    pub fn open_for(&self, uid: u32) -> usize {
        let open = self.open.lock().expect("attach slots lock");
        open.get(&uid).copied().unwrap_or(0)
    }
}

impl Drop for AttachSlot {
    fn drop(&mut self) {
        let Some(uid) = self.uid else { return };
        let mut open = self.slots.open.lock().expect("attach slots lock");
        if let Some(n) = open.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                open.remove(&uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::events::Owner;

    fn caller(uid: u32, admin: bool) -> Caller {
        Caller {
            owner: Owner {
                uid,
                gid: uid,
                groups: vec![uid],
                user: format!("u{uid}"),
            },
            admin,
        }
    }

    #[test]
    fn a_user_gets_the_limit_and_slots_come_back_when_streams_end() {
        let slots = AttachSlots::new(2);
        let a = slots.take(&caller(1000, false)).unwrap();
        let _b = slots.take(&caller(1000, false)).unwrap();
        let e = slots.take(&caller(1000, false)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "u1000 already has 2 attach streams open (prun, gangctl output); the limit is 2 \
             (connections.max_attaches_per_user)"
        );
        // Another user and admins are not held back by it.
        let _c = slots.take(&caller(1001, false)).unwrap();
        let _d: Vec<_> = (0..5)
            .map(|_| slots.take(&caller(0, true)).unwrap())
            .collect();
        drop(a);
        assert_eq!(slots.open_for(1000), 1);
        slots.take(&caller(1000, false)).unwrap();
    }
}
