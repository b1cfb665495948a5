//! The gRPC API of the gang scheduler (`proto/gang/v1/gang.proto`).

pub mod client;
pub mod memory;
pub mod relay;

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("gang.v1");

    /// The encoded file descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/gang_descriptor.bin"));
}

pub use v1::*;

impl From<gang_core::Submesh> for v1::Submesh {
    fn from(s: gang_core::Submesh) -> Self {
        v1::Submesh {
            x: s.x,
            y: s.y,
            w: s.w,
            h: s.h,
        }
    }
}

impl From<v1::Submesh> for gang_core::Submesh {
    fn from(s: v1::Submesh) -> Self {
        gang_core::Submesh::new(s.x, s.y, s.w, s.h)
    }
}

impl v1::JobState {
    /// Whether the job has ended (and will not change again).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            v1::JobState::Completed
                | v1::JobState::Failed
                | v1::JobState::Cancelled
                | v1::JobState::Timeout
        )
    }

    /// Lower-case name for people: "queued", "running", ...
    pub fn label(self) -> &'static str {
        match self {
            v1::JobState::Unspecified => "unknown",
            v1::JobState::Queued => "queued",
            v1::JobState::Starting => "starting",
            v1::JobState::Running => "running",
            v1::JobState::Completed => "completed",
            v1::JobState::Failed => "failed",
            v1::JobState::Cancelled => "cancelled",
            v1::JobState::Timeout => "timeout",
        }
    }
}

impl v1::NodeState {
    pub fn label(self) -> &'static str {
        match self {
            v1::NodeState::Unspecified => "unknown",
            v1::NodeState::Up => "up",
            v1::NodeState::Down => "down",
            v1::NodeState::Drained => "drained",
        }
    }
}

impl From<gang_core::GangMode> for v1::GangMode {
    fn from(m: gang_core::GangMode) -> Self {
        match m {
            gang_core::GangMode::Stop => v1::GangMode::Stop,
            gang_core::GangMode::Priority => v1::GangMode::Priority,
            gang_core::GangMode::None => v1::GangMode::None,
            gang_core::GangMode::Freeze => v1::GangMode::Freeze,
        }
    }
}

impl v1::GangMode {
    /// The mode this names; `None` for UNSPECIFIED (the cluster default applies).
    pub fn resolved(self) -> Option<gang_core::GangMode> {
        match self {
            v1::GangMode::Unspecified => None,
            v1::GangMode::Stop => Some(gang_core::GangMode::Stop),
            v1::GangMode::Priority => Some(gang_core::GangMode::Priority),
            v1::GangMode::None => Some(gang_core::GangMode::None),
            v1::GangMode::Freeze => Some(gang_core::GangMode::Freeze),
        }
    }
}

impl From<gang_core::DeadlockPolicy> for v1::DeadlockPolicy {
    fn from(p: gang_core::DeadlockPolicy) -> Self {
        match p {
            gang_core::DeadlockPolicy::Report => v1::DeadlockPolicy::Report,
            gang_core::DeadlockPolicy::Kill => v1::DeadlockPolicy::Kill,
        }
    }
}

impl v1::DeadlockPolicy {
    /// The policy this names; `None` for UNSPECIFIED (the cluster default applies).
    pub fn resolved(self) -> Option<gang_core::DeadlockPolicy> {
        match self {
            v1::DeadlockPolicy::Unspecified => None,
            v1::DeadlockPolicy::Report => Some(gang_core::DeadlockPolicy::Report),
            v1::DeadlockPolicy::Kill => Some(gang_core::DeadlockPolicy::Kill),
        }
    }
}

impl From<gang_core::MsgContext> for v1::MsgContext {
    fn from(m: gang_core::MsgContext) -> Self {
        match m {
            gang_core::MsgContext::Resident => v1::MsgContext::Resident,
            gang_core::MsgContext::SaveRestore => v1::MsgContext::SaveRestore,
        }
    }
}

impl v1::MsgContext {
    /// The mode this names; `None` for UNSPECIFIED (the default applies).
    pub fn resolved(self) -> Option<gang_core::MsgContext> {
        match self {
            v1::MsgContext::Unspecified => None,
            v1::MsgContext::Resident => Some(gang_core::MsgContext::Resident),
            v1::MsgContext::SaveRestore => Some(gang_core::MsgContext::SaveRestore),
        }
    }
}
