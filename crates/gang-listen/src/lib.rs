//! Admission of connections before their peers are known (see the crate README).

mod vetted;
mod vetting;

pub use vetted::Vetted;
pub use vetting::{Ticket, Vetting, VettingLimits, address_key};
