//! JSON Web Tokens checked against a JWKS file: the signature by a key of
//! the set (the token's `kid`, or the only key), the issuer and the audience
//! configured, and the validity (`nbf` to `exp`) against the time passed
//! in. The file is read again on demand; a set that cannot be read keeps
//! the last good one.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;

/// How far a token's `exp` and `nbf` may be off this node's clock.
const CLOCK_LEEWAY_SECONDS: u64 = 30;

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
    /// Not valid before, if given.
    nbf: Option<u64>,
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
        // The validity is checked below, against the time passed in.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let claims =
            jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| refused(e.to_string()))?.claims;
        let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if claims.exp.saturating_add(CLOCK_LEEWAY_SECONDS) < now {
            return Err(refused(format!("it expired at {} (Unix seconds)", claims.exp)));
        }
        if let Some(nbf) = claims.nbf
            && nbf.saturating_sub(CLOCK_LEEWAY_SECONDS) > now
        {
            return Err(refused(format!("it is not valid before {nbf} (Unix seconds)")));
        }
        Ok(claims.sub)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};

    use super::*;

    const SECRET: &[u8] = b"a secret of the test, 32 bytes or more";
    const NOW: u64 = 1_700_000_000;

    fn verifier(dir: &std::path::Path) -> JwtVerifier {
        let path = dir.join("jwks.json");
        let jwks = serde_json::json!({"keys": [{"kty": "oct", "alg": "HS256", "k": URL_SAFE_NO_PAD.encode(SECRET)}]});
        std::fs::write(&path, jwks.to_string()).unwrap();
        JwtVerifier::load(path, "https://issuer.test".into(), "fairway".into()).unwrap()
    }

    /// A token for `ci` expiring at `exp`, not valid before `nbf` if given.
    fn token(exp: u64, nbf: Option<u64>) -> String {
        let mut claims = serde_json::json!({"sub": "ci", "iss": "https://issuer.test", "aud": "fairway", "exp": exp});
        if let Some(nbf) = nbf {
            claims["nbf"] = nbf.into();
        }
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET)).unwrap()
    }

    /// `exp` and `nbf` are checked against the time given, with the same
    /// leeway either way.
    #[test]
    fn a_token_is_valid_from_its_nbf_to_its_exp_give_or_take_the_leeway() {
        let dir = tempfile::tempdir().unwrap();
        let verifier = verifier(dir.path());
        let at = UNIX_EPOCH + Duration::from_secs(NOW);
        let leeway = CLOCK_LEEWAY_SECONDS;
        for (exp, nbf) in
            [(NOW + 300, None), (NOW + 300, Some(NOW - 10)), (NOW + 300, Some(NOW + leeway)), (NOW - leeway, None)]
        {
            assert_eq!(verifier.subject(&token(exp, nbf), at), Ok("ci".to_owned()), "exp {exp}, nbf {nbf:?}");
        }
        let early = verifier.subject(&token(NOW + 300, Some(NOW + leeway + 1)), at).unwrap_err();
        assert!(early.to_string().contains(&format!("it is not valid before {}", NOW + leeway + 1)), "{early}");
        let late = verifier.subject(&token(NOW - leeway - 1, None), at).unwrap_err();
        assert!(late.to_string().contains("it expired at"), "{late}");
    }
}
