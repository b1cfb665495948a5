//! The policies (`state::policy`): held jobs, dependencies, array limits and time limits,
//! each in its own file.

mod array_throttle;
mod dependency;
mod hold;
mod time_limit;

use crate::state::events::NewJob;
use crate::state::testkit::{World, config};

pub(super) fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
}

pub(super) fn deps(s: &'static str) -> fn(&mut NewJob) {
    // One function per dependency string used below (a fn pointer holds no data).
    match s {
        "afterok:1" => {
            |j| j.dependency = gang_core::schedule::dependency::parse("afterok:1").unwrap()
        }
        "afternotok:1" => {
            |j| j.dependency = gang_core::schedule::dependency::parse("afternotok:1").unwrap()
        }
        "afterany:2" => {
            |j| j.dependency = gang_core::schedule::dependency::parse("afterany:2").unwrap()
        }
        "afterok:2" => {
            |j| j.dependency = gang_core::schedule::dependency::parse("afterok:2").unwrap()
        }
        "after:3" => |j| j.dependency = gang_core::schedule::dependency::parse("after:3").unwrap(),
        _ => unreachable!("add it above"),
    }
}
