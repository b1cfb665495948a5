//! The target of AuthService: `proto_issue_token`, a token asked of the master by a local
//! caller, whatever the request says.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use gang_auth::token::TokenKey;
use gang_proto::v1;
use gang_proto::v1::auth_service_server::AuthService;
use proptest::collection::vec;
use proptest::prelude::*;
use tonic::transport::server::{Connected, UdsConnectInfo};

use super::{decode, edge_u64, encoded, reply};
use crate::auth::Authenticator;
use crate::auth::revocations::Revocations;
use crate::config::{AuthPolicy, DEFAULT_TOKEN_MAX_TTL_S, DEFAULT_TOKEN_TTL_S};
use crate::service::tokens::Tokens;

/// This process's credentials on a Unix socket, as the master's socket reports a local
/// caller's.
fn local_connection() -> UdsConnectInfo {
    static INFO: OnceLock<UdsConnectInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let (a, _b) = tokio::net::UnixStream::pair().expect("a socket pair");
            a.connect_info()
        })
    })
    .clone()
}

/// The handler's future, run to its end: it awaits nothing.
fn now_or_never<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the handler waited on something"),
    }
}

fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

#[test]
fn fuzz_proto_issue_token() {
    const KEY: &[u8] = b"fuzz token key";
    let input = vec(
        encoded(
            "proto_issue_token",
            edge_u64().prop_map(|ttl_s| v1::IssueTokenRequest { ttl_s }),
        ),
        1..=4,
    );
    let policy = AuthPolicy {
        token_ttl_s: DEFAULT_TOKEN_TTL_S,
        token_max_ttl_s: DEFAULT_TOKEN_MAX_TTL_S,
        ..AuthPolicy::default()
    };
    // Issuing writes no revocation: a path in a directory that goes with the test.
    let dir = tempfile::tempdir().unwrap();
    let revoked = Revocations::load(&dir.path().join("revoked"), 0, DEFAULT_TOKEN_MAX_TTL_S)
        .expect("no revocations yet");
    let service = Arc::new(Tokens {
        auth: Arc::new(Authenticator::new(
            policy,
            TokenKey::from_bytes(KEY),
            revoked,
        )),
    });
    gang_fuzz::run("proto_issue_token", 400, input, move |reqs| {
        for bytes in &reqs {
            let Some(req) = decode::<v1::IssueTokenRequest>(bytes)? else {
                continue;
            };
            let mut call = tonic::Request::new(req);
            call.extensions_mut()
                .insert(crate::connections::ConnInfo::unix(local_connection()));
            let t0 = unix_now_s();
            let res = now_or_never(service.issue_token(call))
                .map_err(|s| TestCaseError::fail(format!("a local caller was refused: {s:?}")))?
                .into_inner();
            let t1 = unix_now_s();
            let ttl = match req.ttl_s {
                0 => DEFAULT_TOKEN_TTL_S,
                t => t.min(DEFAULT_TOKEN_MAX_TTL_S),
            };
            let expires_s = (res.expires_ns / 1_000_000_000) as u64;
            prop_assert!(
                (t0 + ttl..=t1 + ttl).contains(&expires_s),
                "{req:?} -> {res:?}"
            );
            let claims = TokenKey::from_bytes(KEY)
                .verify(&res.token, t1 * 1000, DEFAULT_TOKEN_MAX_TTL_S)
                .map_err(|e| {
                    TestCaseError::fail(format!("the token issued does not verify: {e}"))
                })?;
            prop_assert_eq!((claims.uid, &claims.sub), (res.uid, &res.user));
            prop_assert_eq!(&claims.jti, &res.id);
            reply(&res)?;
        }
        Ok(reqs.len() as u64)
    });
}
