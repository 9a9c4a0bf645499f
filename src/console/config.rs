//! Section `[console]`: where the web console listens.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::duration_serde;
use crate::config::ConfigError;
use crate::security::SecurityConfig;

/// Section `[console]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console (`fairway serve` prints its address).
    pub enabled: bool,
    /// `IP:PORT`. Empty: beside a gRPC address on loopback, its IP and the
    /// next port (7071 beside the default 7070; any free port when gRPC's
    /// is 0); beside one beyond loopback, no console. Beyond loopback only
    /// when the node authenticates clients (`[[security.principals]]`), and
    /// with TLS (`security.tls_cert`, served with the gRPC port's
    /// certificate) unless `security.allow_insecure`.
    pub listen: String,
    /// How often the charts of the last hour read the node's counters (1s
    /// to 5m).
    #[serde(with = "duration_serde")]
    pub chart_interval: Duration,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig { enabled: true, listen: String::new(), chart_interval: Duration::from_secs(10) }
    }
}

impl ConsoleConfig {
    /// Where the console listens beside gRPC at `grpc`, or `None` when it is
    /// off; beyond loopback only with what `security` gives gRPC there.
    /// Checks the section too.
    pub fn address(&self, grpc: SocketAddr, security: &SecurityConfig) -> Result<Option<SocketAddr>, ConfigError> {
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&self.chart_interval) {
            return Err(ConfigError::new(
                "console.chart_interval",
                format!("is {:?}; it must be 1s to 5m", self.chart_interval),
            ));
        }
        if !self.enabled {
            return Ok(None);
        }
        let address = if self.listen.is_empty() {
            if !grpc.ip().is_loopback() {
                return Ok(None);
            }
            let port = if grpc.port() == 0 { 0 } else { grpc.port().checked_add(1).unwrap_or(0) };
            SocketAddr::new(grpc.ip(), port)
        } else {
            self.listen.parse().map_err(|_| {
                ConfigError::new(
                    "console.listen",
                    format!("is {:?}; it must be IP:PORT, e.g. 127.0.0.1:7071", self.listen),
                )
            })?
        };
        if !address.ip().is_loopback() {
            let beyond = |why: &str| {
                ConfigError::new(
                    "console.listen",
                    format!(
                        "is {address}, beyond loopback, {why}; or listen on loopback (reach it through an SSH \
                         tunnel), or set console.enabled = false"
                    ),
                )
            };
            if !security.authenticates() {
                return Err(beyond(
                    "where the console is served only behind a login: add [[security.principals]] \
                     (`fairway auth key create`)",
                ));
            }
            if security.tls_files().is_none() && !security.allow_insecure {
                return Err(beyond(
                    "where the console is served only over TLS: set security.tls_cert and security.tls_key \
                     (or security.allow_insecure = true to send credentials in clear text)",
                ));
            }
        }
        Ok(Some(address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc(address: &str) -> SocketAddr {
        address.parse().unwrap()
    }

    #[test]
    fn the_console_listens_beside_grpc_on_loopback_only() {
        let open = SecurityConfig::default();
        let default = ConsoleConfig::default();
        assert_eq!(default.address(grpc("127.0.0.1:7070"), &open).unwrap(), Some(grpc("127.0.0.1:7071")));
        assert_eq!(default.address(grpc("127.0.0.1:0"), &open).unwrap(), Some(grpc("127.0.0.1:0")));
        assert_eq!(default.address(grpc("0.0.0.0:7070"), &open).unwrap(), None, "not beside gRPC beyond loopback");
        let off = ConsoleConfig { enabled: false, ..ConsoleConfig::default() };
        assert_eq!(off.address(grpc("0.0.0.0:7070"), &open).unwrap(), None);
        let typo = ConsoleConfig { listen: "7071".into(), ..ConsoleConfig::default() };
        assert!(typo.address(grpc("127.0.0.1:7070"), &open).unwrap_err().to_string().contains("IP:PORT"));
        let hasty = ConsoleConfig { chart_interval: Duration::from_millis(100), ..ConsoleConfig::default() };
        assert_eq!(hasty.address(grpc("127.0.0.1:7070"), &open).unwrap_err().key, "console.chart_interval");
    }

    #[test]
    fn beyond_loopback_the_console_needs_a_login_and_tls() {
        let asked = ConsoleConfig { listen: "0.0.0.0:7071".into(), ..ConsoleConfig::default() };
        let at = grpc("0.0.0.0:7070");
        let no_login = asked.address(at, &SecurityConfig::default()).unwrap_err();
        assert_eq!(no_login.key, "console.listen");
        assert!(no_login.to_string().contains("security.principals"), "{no_login}");
        let principal = crate::security::PrincipalConfig {
            name: "ops".into(),
            api_key_sha256: vec![crate::security::api_key_hash("fwk_x")],
            tls_common_name: None,
            jwt_subject: None,
            grants: Vec::new(),
        };
        let mut login = SecurityConfig { principals: vec![principal], ..SecurityConfig::default() };
        let no_tls = asked.address(at, &login).unwrap_err();
        assert!(no_tls.to_string().contains("security.tls_cert"), "{no_tls}");
        login.allow_insecure = true;
        assert_eq!(asked.address(at, &login).unwrap(), Some(grpc("0.0.0.0:7071")), "allowed in clear text");
        login.allow_insecure = false;
        (login.tls_cert, login.tls_key) = ("server.crt".into(), "server.key".into());
        assert_eq!(asked.address(at, &login).unwrap(), Some(grpc("0.0.0.0:7071")), "with TLS");
    }
}
