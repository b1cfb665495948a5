//! `AuthService`: tokens for remote clients, issued to local callers only, and their
//! revocation (on every client listener).

use std::sync::Arc;

use gang_proto::v1::{self, auth_service_server::AuthService, revoke_tokens_request::What};
use tonic::{Request, Response, Status};
use tracing::info;

use crate::auth::{Authenticator, RevokeTarget};
use crate::error::MasterError;

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
        let (caller, issued) = self.auth.issue_token(&req, ttl)?;
        Ok(Response::new(v1::IssueTokenResponse {
            token: issued.token,
            expires_ns: (issued.claims.exp as i64).saturating_mul(1_000_000_000),
            user: caller.owner.user,
            uid: caller.owner.uid,
            id: issued.claims.jti,
        }))
    }

    async fn revoke_tokens(
        &self,
        req: Request<v1::RevokeTokensRequest>,
    ) -> Result<Response<v1::RevokeTokensResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let what = match req.into_inner().what {
            Some(What::Token(t)) => RevokeTarget::Token(t),
            Some(What::Id(id)) => RevokeTarget::Id(id),
            Some(What::User(u)) => RevokeTarget::User(u),
            None => {
                return Err(MasterError::Invalid(
                    "say what to revoke: a token, a token's id, or a user".into(),
                )
                .into());
            }
        };
        let granted = self.auth.may_revoke(&caller, what)?;
        // The revocation is written and synced to disk: off the async workers.
        let (auth, g) = (self.auth.clone(), granted.clone());
        tokio::task::spawn_blocking(move || auth.revoke(&g))
            .await
            .map_err(|e| MasterError::Internal(format!("revoking tokens: {e}")))??;
        info!(by = %caller.owner.user, id = %granted.id, user = %granted.user,
            "tokens revoked");
        let by_user = matches!(
            granted.revocation,
            crate::auth::revocations::Revocation::User(_)
        );
        Ok(Response::new(v1::RevokeTokensResponse {
            id: granted.id,
            user: granted.user,
            issued_until_ns: if by_user {
                (granted.at_ms as i64).saturating_mul(1_000_000)
            } else {
                0
            },
        }))
    }
}
