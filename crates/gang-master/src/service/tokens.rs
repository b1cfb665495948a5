//! `AuthService`: tokens for remote clients, issued to local callers only.

use std::sync::Arc;

use gang_proto::v1::{self, auth_service_server::AuthService};
use tonic::{Request, Response, Status};

use crate::auth::Authenticator;

pub struct Tokens {
    pub auth: Arc<Authenticator>,
}

#[tonic::async_trait]
impl AuthService for Tokens {
    async fn issue_token(
        &self,
        req: Request<v1::IssueTokenRequest>,
    ) -> Result<Response<v1::IssueTokenResponse>, Status> {
        let ttl = req.get_ref().ttl_s;
        let (caller, token, expires_s) = self.auth.issue_token(&req, ttl)?;
        Ok(Response::new(v1::IssueTokenResponse {
            token,
            expires_ns: (expires_s as i64).saturating_mul(1_000_000_000),
            user: caller.owner.user,
            uid: caller.owner.uid,
        }))
    }
}
