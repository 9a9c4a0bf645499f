//! Pushing spans and metrics to an OTLP/gRPC collector (over the same tonic
//! as the server's). Both pipelines must be built inside a tokio runtime.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Histogram, Meter, MeterProvider};
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::TelemetryError;
use super::metrics::{ALL, DISPATCH_LATENCY, Kind, Sampler, Values};
use crate::histogram::BOUNDS_MS;
use crate::matcher::QueueStats;

/// Instruments read within this long of each other share one reading of the
/// queues (a push reads every instrument at once).
const ONE_PUSH: Duration = Duration::from_millis(500);

/// What the collector is told about the sender: `service.name` is
/// `fairway`, `service.instance.id` the node's name (its address).
fn resource(node: &str) -> Resource {
    Resource::builder()
        .with_service_name("fairway")
        .with_attribute(KeyValue::new("service.instance.id", node.to_owned()))
        .build()
}

/// Spans, pushed in batches to `endpoint` (for a `tracing_opentelemetry`
/// layer). Sampling follows `OTEL_TRACES_SAMPLER` (default: every span).
pub fn tracer_provider(endpoint: &str, node: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = SpanExporter::builder().with_tonic().with_endpoint(endpoint).build()?;
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource(node)).build())
}

/// The metrics of [`super::metrics::ALL`], pushed to a collector: the
/// dispatch latency as it is recorded, the rest read from the queues at each
/// push. Cumulative temporality, as Prometheus counts.
#[derive(Debug)]
pub struct OtlpMetrics {
    provider: SdkMeterProvider,
    meter: Meter,
    dispatch_latency: Histogram<f64>,
}

impl OtlpMetrics {
    /// Pushes every `interval` to `endpoint`, as node `node`.
    pub fn start(endpoint: &str, interval: Duration, node: &str) -> Result<OtlpMetrics, TelemetryError> {
        let exporter = MetricExporter::builder().with_tonic().with_endpoint(endpoint).build()?;
        let reader = PeriodicReader::builder(exporter).with_interval(interval).build();
        let provider = SdkMeterProvider::builder().with_reader(reader).with_resource(resource(node)).build();
        let meter = provider.meter("fairway");
        let dispatch_latency = meter
            .f64_histogram(DISPATCH_LATENCY.otlp_name())
            .with_unit(DISPATCH_LATENCY.unit)
            .with_description(DISPATCH_LATENCY.help)
            .with_boundaries(BOUNDS_MS.iter().map(|ms| *ms as f64 / 1000.0).collect())
            .build();
        Ok(OtlpMetrics { provider, meter, dispatch_latency })
    }

    /// The histogram the queues record dispatch latencies into (in seconds).
    pub fn dispatch_latency(&self) -> Histogram<f64> {
        self.dispatch_latency.clone()
    }

    /// Registers every other metric, read through `sampler` at each push.
    pub(super) fn observe(&self, sampler: Arc<Sampler>) {
        for metric in ALL {
            let sampler = sampler.clone();
            let name = metric.otlp_name();
            match (metric.kind, metric.values) {
                (Kind::Counter, Values::PerQueue(value)) => {
                    self.meter
                        .u64_observable_counter(name)
                        .with_unit(metric.unit)
                        .with_description(metric.help)
                        .with_callback(per_queue(sampler, value))
                        .build();
                }
                (_, Values::PerQueue(value)) => {
                    self.meter
                        .u64_observable_gauge(name)
                        .with_unit(metric.unit)
                        .with_description(metric.help)
                        .with_callback(per_queue(sampler, value))
                        .build();
                }
                (_, Values::PerLevel(value)) => {
                    self.meter
                        .u64_observable_gauge(name)
                        .with_unit(metric.unit)
                        .with_description(metric.help)
                        .with_callback(move |observer| {
                            for (queue, stats) in sampler.recent(ONE_PUSH).iter() {
                                for level in &stats.levels {
                                    let attributes = [
                                        KeyValue::new("queue", queue.to_string()),
                                        KeyValue::new("priority", i64::from(level.priority.get())),
                                    ];
                                    observer.observe(value(level), &attributes);
                                }
                            }
                        })
                        .build();
                }
                (_, Values::Latency) => {}
            }
        }
    }

    /// Pushes a last time and stops.
    pub(super) async fn shutdown(self) {
        let provider = self.provider;
        // The SDK blocks until the last push is done; that push runs on this runtime.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "OTLP metrics: the last push failed"),
            Err(error) => tracing::warn!(%error, "OTLP metrics: shutdown panicked"),
        }
    }
}

/// A callback observing `value` of every queue, labelled by queue.
fn per_queue(
    sampler: Arc<Sampler>,
    value: fn(&QueueStats) -> u64,
) -> impl Fn(&dyn AsyncInstrument<u64>) + Send + Sync + 'static {
    move |observer| {
        for (queue, stats) in sampler.recent(ONE_PUSH).iter() {
            observer.observe(value(stats), &[KeyValue::new("queue", queue.to_string())]);
        }
    }
}
