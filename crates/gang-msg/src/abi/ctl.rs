//! The control protocol on `ctl.sock`: u32 little-endian length, then one JSON
//! message (serde's externally tagged enums: `{"Hello":{"pid":1,"rank":0}}`,
//! `"Fence"`).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Largest frame either side accepts; a fence reply of a 1,024-rank job with
/// 200-byte endpoints is ~250 KiB.
pub const MAX_CTL_FRAME: u32 = 16 << 20;

/// Longest key a `Put` may have (the library's keys are a few bytes).
pub const CTL_KEY_MAX: usize = 256;
/// Longest value a `Put` may have (an endpoint is a few hundred bytes).
pub const CTL_VALUE_MAX: usize = 64 << 10;
/// Most a rank may keep in the agent through `Put` (keys and values, all of them): they
/// go to the master with each fence, and they are the agent's memory.
pub const CTL_PUTS_MAX: usize = 1 << 20;

/// Rank to agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CtlRequest {
    /// First message on the connection. No reply.
    Hello { pid: u32, rank: u32 },
    /// Store `key` = `value` in the job's KVS. No reply; a put over the limits
    /// (`CTL_KEY_MAX`, `CTL_VALUE_MAX`, `CTL_PUTS_MAX`) is dropped, and the next fence is
    /// answered with an `Error` that says so.
    Put { key: String, value: String },
    /// Replied with `FenceDone` once every rank of the job has fenced; the
    /// reply holds every key put by any rank before its fence.
    Fence,
    /// The rank gives up; the agent fails the job with this code and message.
    Abort { code: i32, message: String },
}

/// Agent to rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CtlReply {
    FenceDone {
        kvs: BTreeMap<String, String>,
    },
    /// The agent refused a request (bad rank, fence failed across nodes...).
    Error {
        message: String,
    },
}

/// Write one length-prefixed JSON frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_CTL_FRAME as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "control frame too large",
        ));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)
}

/// Read one length-prefixed JSON frame; `Ok(None)` on a clean EOF before it.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_CTL_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame of {len} bytes"),
        ));
    }
    // Grown as bytes arrive: a length alone (a peer that then goes quiet) costs nothing.
    let mut body = Vec::new();
    r.take(u64::from(len)).read_to_end(&mut body)?;
    if body.len() < len as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the stream ended inside a frame of {len} bytes"),
        ));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wire_shape() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &CtlRequest::Hello { pid: 7, rank: 1 }).unwrap();
        write_frame(&mut buf, &CtlRequest::Fence).unwrap();
        let wire = br#"{"Hello":{"pid":7,"rank":1}}"#;
        assert_eq!(&buf[..4], (wire.len() as u32).to_le_bytes().as_slice());
        assert_eq!(&buf[4..4 + wire.len()], wire.as_slice());
        let mut r = &buf[..];
        assert_eq!(
            read_frame::<CtlRequest>(&mut r).unwrap(),
            Some(CtlRequest::Hello { pid: 7, rank: 1 })
        );
        assert_eq!(
            read_frame::<CtlRequest>(&mut r).unwrap(),
            Some(CtlRequest::Fence)
        );
        assert_eq!(read_frame::<CtlRequest>(&mut r).unwrap(), None);
        let bad = (MAX_CTL_FRAME + 1).to_le_bytes();
        assert!(read_frame::<CtlRequest>(&mut &bad[..]).is_err());
    }
}
