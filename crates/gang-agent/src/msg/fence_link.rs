//! A child's stream to its parent in a job's fence tree (`NodeRelay.FenceStream`): opened
//! at the rank's first fence, kept while the rank lives, so that a fence is one message
//! each way on it instead of a call. At 1,024 ranks a fence is 1,023 parts going up; as
//! calls, each opened an HTTP/2 stream with its headers both ways and its trailers, and a
//! task on the parent, and that, not the fence's few bytes, was what the agents' CPU went
//! on.
//!
//! A link is used by one fence at a time (a rank fences in order) and is taken out of its
//! job while used. A link that breaks is dropped and the next try opens another; an error
//! the parent answers (no rank of the job yet, send everything) leaves it usable. A parent
//! that does not serve the stream (an older agent) is called with `FenceUp`.

use gang_proto::v1::node_relay_client::NodeRelayClient;
use gang_proto::v1::{FenceUpAnswer, FenceUpRequest, FenceUpResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};

pub struct FenceLink {
    requests: mpsc::Sender<FenceUpRequest>,
    answers: tonic::Streaming<FenceUpAnswer>,
}

impl FenceLink {
    async fn open(client: &mut NodeRelayClient<Channel>) -> Result<FenceLink, Status> {
        // One request in flight: the channel holds the next only if a fence is retried
        // before its answer came, which the parent answers in order.
        let (requests, rx) = mpsc::channel(1);
        let answers = client
            .fence_stream(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(FenceLink { requests, answers })
    }

    /// Send one part and wait for its answer: `Err` if the link broke (drop it), else
    /// the parent's answer, which may be an error of its own.
    async fn ask(
        &mut self,
        req: FenceUpRequest,
    ) -> Result<Result<FenceUpResponse, Status>, Status> {
        let closed = || Status::unavailable("the fence stream to the parent closed");
        self.requests.send(req).await.map_err(|_| closed())?;
        match self.answers.message().await? {
            Some(FenceUpAnswer {
                code: 0, response, ..
            }) => Ok(Ok(response.unwrap_or_default())),
            Some(a) => Ok(Err(Status::new(Code::from_i32(a.code), a.message))),
            None => Err(closed()),
        }
    }
}

/// One part of a fence to the parent, on `link` if there is one (else on a new stream,
/// from `client`: an error there is the parent's address, not worth retrying); the
/// answer, and the link to keep for the next fence (none if it broke).
pub async fn ask_parent(
    client: impl FnOnce() -> Result<NodeRelayClient<Channel>, String>,
    link: Option<FenceLink>,
    req: FenceUpRequest,
) -> (Result<FenceUpResponse, Status>, Option<FenceLink>) {
    let mut link = match link {
        Some(l) => l,
        None => match client() {
            Err(e) => return (Err(Status::invalid_argument(e)), None),
            Ok(mut client) => match FenceLink::open(&mut client).await {
                Ok(l) => l,
                // An older parent: the call (and a stream tried again next fence).
                Err(s) if s.code() == Code::Unimplemented => {
                    return (client.fence_up(req).await.map(|r| r.into_inner()), None);
                }
                Err(s) => return (Err(s), None),
            },
        },
    };
    match link.ask(req).await {
        Ok(answer) => (answer, Some(link)),
        Err(broken) => (Err(broken), None),
    }
}
