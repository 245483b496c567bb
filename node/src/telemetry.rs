//! What a node reports about the requests it serves besides its metrics: its log on stderr
//! (text or JSON, [`LogConfig`]) and, with `[tracing] otlp_endpoint` set, its spans exported
//! over OTLP/gRPC to an OpenTelemetry collector.
//!
//! The spans are the ones the log already has: `http` and `grpc` for each request
//! ([`crate::trace`] names their `request_id`), and `forwarded` on the leader for a write a
//! follower sent it. They form one trace across nodes with W3C Trace Context: a request's
//! span takes the caller's `traceparent` (and `tracestate`) as its parent, and a write
//! forwarded to the leader carries its follower span's context there
//! ([`forward_context`], [`adopt_forwarded`]). With no endpoint nothing is exported and these
//! helpers do nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::HeaderMap;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

use crate::config::{LogConfig, LogFormat, TracingConfig};

/// The log filter when `ROWCALL_LOG` is not set.
const DEFAULT_FILTER: &str = "info,openraft=warn,sled=warn";

/// How long a stopping node tries to send the spans it still holds.
const SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Set once spans are exported: the context helpers do nothing before.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The endpoint is not an `http://` URL.
    #[error(
        "[tracing] otlp_endpoint {0:?} is not http://HOST:PORT (export to a collector or agent \
         beside the node; it forwards over TLS)"
    )]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("cannot export traces to {endpoint}: {reason}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// What the exporter said.
        reason: String,
    },
    /// A global subscriber was already installed.
    #[error("a log subscriber is already installed")]
    Installed,
}

/// The installed log and trace export; [`Telemetry::shutdown`] sends the spans still held.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the process's log (stderr, at the `ROWCALL_LOG` filter) and, with an
    /// endpoint, the export of spans as the service `rowcall-node`, instance `node_id`.
    /// Call once, inside the tokio runtime (the exporter's channel runs on it).
    pub fn install(
        log: &LogConfig,
        tracing: &TracingConfig,
        node_id: u64,
    ) -> Result<Self, TelemetryError> {
        use std::io::IsTerminal;
        let filter = tracing_subscriber::EnvFilter::try_from_env("ROWCALL_LOG")
            .unwrap_or_else(|_| DEFAULT_FILTER.into());
        let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let lines = match log.format {
            LogFormat::Text => lines
                .with_ansi(
                    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
                )
                .boxed(),
            LogFormat::Json => lines
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .boxed(),
        };
        let provider = tracing
            .otlp_endpoint
            .as_deref()
            .map(|endpoint| provider(endpoint, node_id))
            .transpose()?;
        // The log's level does not decide which spans are exported: a node logging only
        // warnings still traces its requests.
        let spans = provider.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("rowcall-node"))
                .with_filter(Targets::new().with_target("rowcall_node", Level::INFO))
        });
        tracing_subscriber::registry()
            .with(lines.with_filter(filter))
            .with(spans)
            .try_init()
            .map_err(|_| TelemetryError::Installed)?;
        if let Some(endpoint) = &tracing.otlp_endpoint {
            EXPORTING.store(true, Ordering::Release);
            tracing::info!(endpoint, "exporting traces over OTLP");
        }
        Ok(Self { provider })
    }

    /// Sends the spans not yet exported and stops exporting; gives up after
    /// [`SHUTDOWN_BOUND`], so that an unreachable collector cannot hold a stopping node.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let flushed = tokio::time::timeout(
            SHUTDOWN_BOUND,
            tokio::task::spawn_blocking(move || provider.shutdown()),
        )
        .await;
        match flushed {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("rowcall: traces not all exported at shutdown: {e}"),
            Ok(Err(_)) | Err(_) => eprintln!(
                "rowcall: traces not all exported at shutdown: the collector did not answer \
                 within {} s",
                SHUTDOWN_BOUND.as_secs()
            ),
        }
    }
}

/// The tracer provider exporting to `endpoint` in batches.
fn provider(endpoint: &str, node_id: u64) -> Result<SdkTracerProvider, TelemetryError> {
    let authority = endpoint.strip_prefix("http://").unwrap_or_default();
    if authority.is_empty() || authority.contains(char::is_whitespace) {
        return Err(TelemetryError::Endpoint(endpoint.to_owned()));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            reason: e.to_string(),
        })?;
    let resource = Resource::builder()
        .with_service_name("rowcall-node")
        .with_attributes([
            opentelemetry::KeyValue::new("service.instance.id", node_id.to_string()),
            opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    Ok(SdkTracerProvider::builder()
        .with_resource(resource)
        .with_batch_exporter(exporter)
        .build())
}

fn exporting() -> bool {
    EXPORTING.load(Ordering::Acquire)
}

/// Makes the caller's span (the request's `traceparent` and `tracestate` headers) the parent
/// of `span`, when there is one and spans are exported.
pub fn adopt_caller(span: &tracing::Span, headers: &HeaderMap) {
    if !exporting() || !headers.contains_key(crate::trace::TRACEPARENT) {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    let _ = span.set_parent(parent);
}

/// The W3C context of the current span (`traceparent`, `tracestate`), for a write this node
/// forwards to the leader; empty unless spans are exported.
pub fn forward_context() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    if exporting() {
        let context = tracing::Span::current().context();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
    }
    carrier
}

/// Makes the follower's span that forwarded a write (its [`forward_context`]) the parent of
/// `span` on the leader.
pub fn adopt_forwarded(span: &tracing::Span, context: &HashMap<String, String>) {
    if !exporting() || context.is_empty() {
        return;
    }
    let _ = span.set_parent(TraceContextPropagator::new().extract(context));
}

/// Request headers as a propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_must_be_plain_http_with_an_address() {
        for bad in [
            "",
            "collector:4317",
            "https://collector:4317",
            "http://",
            "http:// x",
        ] {
            let error = provider(bad, 1).unwrap_err();
            assert!(
                matches!(error, TelemetryError::Endpoint(_)),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn headers_read_as_the_propagator_expects() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let carrier = Headers(&headers);
        assert_eq!(
            carrier.get("traceparent"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(carrier.keys(), vec!["traceparent"]);
    }
}
