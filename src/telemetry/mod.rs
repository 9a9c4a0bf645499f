//! Telemetry: per-queue metrics read from the queues' live state, served as
//! Prometheus text on `GET /metrics` and, when an OTLP collector is
//! configured, pushed to it together with the spans of gRPC requests.
//!
//! Invariants: the hot path only ever records with atomics (the dispatch
//! latency histogram; with OTLP on, the SDK's histogram as well), and every
//! other value is read at export time from state the queues keep anyway; a
//! counter never goes down between two exports of one node (see
//! [`metrics::Sampler`]); the exports start after the queues and stop last,
//! after the store is closed (see `crate::server`).

mod http;
pub mod metrics;
pub mod otlp;
pub mod schedules;

pub use crate::histogram;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::matcher::Queues;
use crate::model::ValidationError;
use metrics::Sampler;
use otlp::OtlpMetrics;
pub use schedules::ScheduleGauges;

/// Section `[telemetry]` of the config. Everything is off by default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Where `fairway serve` answers `GET /metrics` (Prometheus text), e.g.
    /// `127.0.0.1:9464`; empty: nowhere. Beyond loopback only with
    /// `metrics_allow_insecure`.
    pub metrics_listen: String,
    /// Serve `/metrics`, which has no authentication, on an address beyond
    /// loopback anyway (with a warning at start): anyone who reaches it
    /// reads every queue's name and counts.
    pub metrics_allow_insecure: bool,
    /// An OTLP/gRPC collector, e.g. `http://127.0.0.1:4317`, to push spans
    /// and metrics to; empty: none.
    pub otlp_endpoint: String,
    /// How often metrics are pushed to the collector.
    #[serde(with = "crate::clock::duration_serde")]
    pub otlp_export_interval: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            metrics_listen: String::new(),
            metrics_allow_insecure: false,
            otlp_endpoint: String::new(),
            otlp_export_interval: Duration::from_secs(10),
        }
    }
}

/// The shortest and longest `otlp_export_interval`.
const EXPORT_INTERVALS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));

impl TelemetryConfig {
    /// Where metrics are served, if anywhere.
    pub fn metrics_listen(&self) -> Result<Option<SocketAddr>, String> {
        if self.metrics_listen.is_empty() {
            return Ok(None);
        }
        self.metrics_listen.parse().map(Some).map_err(|_| {
            format!("is {:?}; it must be IP:PORT, e.g. 127.0.0.1:9464, or empty (off)", self.metrics_listen)
        })
    }

    /// The collector to push to, if any: `http://HOST:PORT`.
    pub fn otlp_endpoint(&self) -> Result<Option<String>, String> {
        let endpoint = self.otlp_endpoint.as_str();
        if endpoint.is_empty() {
            return Ok(None);
        }
        let example = "e.g. http://127.0.0.1:4317, or empty (off)";
        let uri: tonic::transport::Uri =
            endpoint.parse().map_err(|_| format!("is {endpoint:?}; it must be a URL, {example}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("is {endpoint:?}; it must start with http:// (TLS is not built in), {example}"));
        }
        if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none_or(|port| port == 0) {
            return Err(format!("is {endpoint:?}; it must name a host and a port, {example}"));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!("is {endpoint:?}; it must have no path, {example}"));
        }
        Ok(Some(endpoint.trim_end_matches('/').to_owned()))
    }

    /// Checks section `[telemetry]`; the error names the key at fault.
    pub fn validate(&self, grpc_listen: SocketAddr) -> Result<(), ValidationError> {
        let metrics = self.metrics_listen().map_err(|m| ValidationError::new("telemetry.metrics_listen", m))?;
        if let Some(address) = metrics
            && address.port() != 0
            && address == grpc_listen
        {
            return Err(ValidationError::new(
                "telemetry.metrics_listen",
                format!("is {address}, which `listen` uses already"),
            ));
        }
        self.otlp_endpoint().map_err(|m| ValidationError::new("telemetry.otlp_endpoint", m))?;
        let (shortest, longest) = EXPORT_INTERVALS;
        if !(shortest..=longest).contains(&self.otlp_export_interval) {
            return Err(ValidationError::new("telemetry.otlp_export_interval", "must be in [1s, 1h]"));
        }
        Ok(())
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Otlp(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The exports of a node's metrics: the `/metrics` endpoint and the OTLP
/// push. Started once the queues exist; stopped last.
#[derive(Debug)]
pub struct Exports {
    stop: CancellationToken,
    http: Option<JoinHandle<()>>,
    otlp: Option<OtlpMetrics>,
}

impl Exports {
    /// Serves `/metrics` on `listener` if given, and has `otlp` (if given,
    /// created before the queues so that they record into its latency
    /// histogram) read the queues at each push.
    pub fn start(
        queues: Arc<Queues>,
        schedules: Arc<ScheduleGauges>,
        listener: Option<TcpListener>,
        otlp: Option<OtlpMetrics>,
    ) -> Exports {
        let sampler = Arc::new(Sampler::new(queues, schedules));
        let stop = CancellationToken::new();
        let http = listener.map(|listener| {
            if let Ok(address) = listener.local_addr() {
                tracing::info!(%address, "serving metrics on /metrics");
            }
            tokio::spawn(http::serve(listener, sampler.clone(), stop.clone()))
        });
        if let Some(otlp) = &otlp {
            otlp.observe(sampler);
        }
        Exports { stop, http, otlp }
    }

    /// Stops answering scrapes (those in progress finish), then pushes the
    /// metrics to the collector a last time.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Some(http) = self.http {
            let _ = http.await;
        }
        if let Some(otlp) = self.otlp {
            otlp.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 7070))
    }

    fn check(config: TelemetryConfig) -> Result<(), (String, String)> {
        config.validate(grpc()).map_err(|e| (e.field, e.message))
    }

    #[test]
    fn off_by_default() {
        let config = TelemetryConfig::default();
        assert_eq!(check(config.clone()), Ok(()));
        assert_eq!(config.metrics_listen(), Ok(None));
        assert_eq!(config.otlp_endpoint(), Ok(None));
    }

    #[test]
    fn metrics_listen_is_an_address_apart_from_grpc() {
        let with = |listen: &str| TelemetryConfig { metrics_listen: listen.into(), ..TelemetryConfig::default() };
        assert_eq!(with("0.0.0.0:9464").metrics_listen(), Ok(Some(SocketAddr::from(([0, 0, 0, 0], 9464)))));
        assert_eq!(check(with("127.0.0.1:0")), Ok(()));
        let (key, message) = check(with("localhost:9464")).unwrap_err();
        assert_eq!(key, "telemetry.metrics_listen");
        assert!(message.contains("IP:PORT"), "{message}");
        let (key, message) = check(with("127.0.0.1:7070")).unwrap_err();
        assert_eq!(key, "telemetry.metrics_listen");
        assert!(message.contains("`listen`"), "{message}");
    }

    #[test]
    fn otlp_endpoint_is_http_with_a_port() {
        let with = |endpoint: &str| TelemetryConfig { otlp_endpoint: endpoint.into(), ..TelemetryConfig::default() };
        assert_eq!(with("http://collector:4317/").otlp_endpoint(), Ok(Some("http://collector:4317".to_owned())));
        for (bad, says) in [
            ("collector:4317", "http://"),
            ("https://collector:4317", "TLS"),
            ("http://collector", "port"),
            ("http://collector:4317/v1/traces", "no path"),
            ("http://", "URL"),
        ] {
            let (key, message) = check(with(bad)).unwrap_err();
            assert_eq!(key, "telemetry.otlp_endpoint", "{bad}");
            assert!(message.contains(says), "{bad}: {message}");
        }
    }

    #[test]
    fn export_interval_is_bounded() {
        for (interval, ok) in [(0, false), (1, true), (3600, true), (3601, false)] {
            let config =
                TelemetryConfig { otlp_export_interval: Duration::from_secs(interval), ..TelemetryConfig::default() };
            let result = check(config);
            assert_eq!(result.is_ok(), ok, "{interval}s: {result:?}");
            if let Err((key, message)) = result {
                assert_eq!(key, "telemetry.otlp_export_interval");
                assert!(message.contains("[1s, 1h]"), "{message}");
            }
        }
    }
}
