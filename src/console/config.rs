//! Section `[console]`: where the web console listens.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::duration_serde;
use crate::config::ConfigError;

/// Section `[console]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console (`fairway serve` prints its address).
    pub enabled: bool,
    /// `IP:PORT`, on loopback (the console serves plain HTTP). Empty: beside
    /// a gRPC address on loopback, its IP and the next port (7071 beside the
    /// default 7070; any free port when gRPC's is 0); beside one beyond
    /// loopback, no console.
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
    /// off.
    /// Checks the section too.
    pub fn address(&self, grpc: SocketAddr) -> Result<Option<SocketAddr>, ConfigError> {
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
            return Err(ConfigError::new(
                "console.listen",
                format!(
                    "is {address}, beyond loopback: the console serves plain HTTP, so it listens on loopback only \
                     (reach it through an SSH tunnel or a proxy with TLS), or set console.enabled = false"
                ),
            ));
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
        let default = ConsoleConfig::default();
        assert_eq!(default.address(grpc("127.0.0.1:7070")).unwrap(), Some(grpc("127.0.0.1:7071")));
        assert_eq!(default.address(grpc("127.0.0.1:0")).unwrap(), Some(grpc("127.0.0.1:0")));
        assert_eq!(default.address(grpc("0.0.0.0:7070")).unwrap(), None, "not beside gRPC beyond loopback");
        let asked = ConsoleConfig { listen: "0.0.0.0:7071".into(), ..ConsoleConfig::default() };
        let beyond = asked.address(grpc("0.0.0.0:7070")).unwrap_err();
        assert_eq!(beyond.key, "console.listen");
        assert!(beyond.to_string().contains("loopback"), "{beyond}");
        let off = ConsoleConfig { enabled: false, ..ConsoleConfig::default() };
        assert_eq!(off.address(grpc("0.0.0.0:7070")).unwrap(), None);
        let typo = ConsoleConfig { listen: "7071".into(), ..ConsoleConfig::default() };
        assert!(typo.address(grpc("127.0.0.1:7070")).unwrap_err().to_string().contains("IP:PORT"));
        let hasty = ConsoleConfig { chart_interval: Duration::from_millis(100), ..ConsoleConfig::default() };
        assert_eq!(hasty.address(grpc("127.0.0.1:7070")).unwrap_err().key, "console.chart_interval");
    }
}
