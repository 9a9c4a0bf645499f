//! JSON Web Tokens checked against a JWKS file: the signature by a key of
//! the set (the token's `kid`, or the only key), the issuer and the audience
//! configured, and the expiry against the time passed in. The file is read
//! again on demand; a set that cannot be read keeps the last good one.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;

/// How much a token's `exp` may lag behind this node's clock.
const EXPIRY_LEEWAY_SECONDS: u64 = 30;

/// Why a JWKS file or a token was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    /// The JWKS file cannot be read or parsed.
    #[error("security.jwt_jwks {path}: {message}")]
    Jwks {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The token is not one this server accepts.
    #[error("the JWT is refused: {0}")]
    Token(String),
}

/// The claims a token must carry; others are ignored.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
}

/// Checks tokens against the keys of a JWKS file.
#[derive(Debug)]
pub struct JwtVerifier {
    path: PathBuf,
    issuer: String,
    audience: String,
    keys: RwLock<(Vec<u8>, Arc<JwkSet>)>,
}

impl JwtVerifier {
    /// Reads the key set at `path`; tokens must come from `issuer` for
    /// `audience`.
    pub fn load(path: PathBuf, issuer: String, audience: String) -> Result<JwtVerifier, JwtError> {
        let (bytes, keys) = read(&path)?;
        Ok(JwtVerifier { path, issuer, audience, keys: RwLock::new((bytes, Arc::new(keys))) })
    }

    /// Reads the file again; whether the set changed.
    pub fn reload(&self) -> Result<bool, JwtError> {
        let (bytes, keys) = read(&self.path)?;
        let mut current = self.keys.write().expect("JWKS lock");
        if current.0 == bytes {
            return Ok(false);
        }
        *current = (bytes, Arc::new(keys));
        Ok(true)
    }

    /// The subject of `token`, if it is valid at `now`.
    pub fn subject(&self, token: &str, now: SystemTime) -> Result<String, JwtError> {
        let refused = |message: String| JwtError::Token(message);
        let header = jsonwebtoken::decode_header(token).map_err(|e| refused(e.to_string()))?;
        let keys = self.keys.read().expect("JWKS lock").1.clone();
        let jwk = match (&header.kid, keys.keys.as_slice()) {
            (Some(kid), _) => keys.find(kid).ok_or_else(|| refused(format!("no key {kid:?} in the JWKS")))?,
            (None, [only]) => only,
            (None, _) => return Err(refused("it names no key (kid) and the JWKS has several".into())),
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| refused(format!("key {:?}: {e}", header.kid)))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.required_spec_claims = HashSet::from(["exp", "iss", "aud", "sub"].map(str::to_owned));
        // The expiry is checked below, against the time passed in.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| refused(e.to_string()))?;
        let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if claims.claims.exp.saturating_add(EXPIRY_LEEWAY_SECONDS) < now {
            return Err(refused(format!("it expired at {} (Unix seconds)", claims.claims.exp)));
        }
        Ok(claims.claims.sub)
    }
}

fn read(path: &PathBuf) -> Result<(Vec<u8>, JwkSet), JwtError> {
    let failed = |message: String| JwtError::Jwks { path: path.clone(), message };
    let bytes = std::fs::read(path).map_err(|e| failed(format!("cannot read it: {e}")))?;
    let keys: JwkSet = serde_json::from_slice(&bytes).map_err(|e| failed(format!("not a JWK set: {e}")))?;
    if keys.keys.is_empty() {
        return Err(failed("holds no key".into()));
    }
    Ok((bytes, keys))
}
