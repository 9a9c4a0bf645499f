//! The client side of authentication: an interceptor that sends a bearer
//! token (an API key or a JWT) with every request, for Fairway's own
//! clients (the CLI, `fairway worker`, `fairway-lab bench`, tests).

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// A channel whose requests carry the bearer token, if any.
pub type AuthChannel = InterceptedService<Channel, BearerToken>;

/// Sends `authorization: Bearer <token>`; no token sends nothing.
#[derive(Clone, Default)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "BearerToken(..)" } else { "BearerToken(none)" })
    }
}

impl BearerToken {
    /// A token to send; `None` or empty sends none. A token that cannot be
    /// a metadata value (not visible ASCII) is refused.
    pub fn new(token: Option<&str>) -> Result<BearerToken, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(BearerToken(None)),
            Some(token) => format!("Bearer {token}")
                .parse()
                .map(|value| BearerToken(Some(value)))
                .map_err(|_| "the token must be visible ASCII".to_owned()),
        }
    }

    /// `channel`, sending this token.
    pub fn on(self, channel: Channel) -> AuthChannel {
        InterceptedService::new(channel, self)
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}
