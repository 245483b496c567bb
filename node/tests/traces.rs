//! Traces exported over OTLP (issue 16): three real processes export their spans to a
//! collector stand-in this test runs (the OTLP/gRPC trace service, from the OpenTelemetry
//! project's own protos). A directory write sent to a follower with a W3C `traceparent`
//! makes one trace: the follower's span is a child of the caller's, and the leader's span
//! for the forwarded write is a child of the follower's. Spans still held when a node stops
//! are sent before it exits.

mod support;

use std::process::Command;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use serde_json::json;
use support::{get_json, member_args, spawn, wait_ready, Process, ADMIN};

/// The caller's trace and span, as its `traceparent` names them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// One exported span, with the node that exported it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    instance: String,
    name: String,
    trace: String,
    span: String,
    parent: String,
}

/// A collector stand-in: keeps every span it is sent.
#[derive(Debug, Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Exported>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let attribute = |key: &str| {
                let attributes = resource_spans.resource.iter().flat_map(|r| &r.attributes);
                attributes
                    .filter(|a| a.key == key)
                    .find_map(|a| match a.value.as_ref()?.value.as_ref()? {
                        AnyValue::StringValue(s) => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
            };
            let (service, instance) = (attribute("service.name"), attribute("service.instance.id"));
            for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
                kept.push(Exported {
                    service: service.clone(),
                    instance: instance.clone(),
                    name: span.name.clone(),
                    trace: hex::encode(&span.trace_id),
                    span: hex::encode(&span.span_id),
                    parent: hex::encode(&span.parent_span_id),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts the stand-in on a free port; its address.
async fn start_collector(collector: Collector) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// SIGTERM, then waits for the process to exit.
fn stop(process: &mut Process) {
    let pid = process.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success(), "SIGTERM to {pid}");
    let status = process.child.wait().expect("the node exits");
    assert!(status.success(), "a clean exit on SIGTERM: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_is_one_trace_from_the_caller_through_the_follower_to_the_leader() {
    let collector = Collector::default();
    let endpoint = start_collector(collector.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let node = |id: u64, join: Option<&str>| -> Process {
        let mut args = member_args(id, join);
        args.extend(["--otlp-endpoint".to_owned(), endpoint.clone()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        spawn(&args, &dir.path().join(format!("data-{id}")), None)
    };
    let mut nodes = vec![node(1, None)];
    wait_ready(&http, &nodes[0].url).await;
    for id in 2..=3 {
        let joined = node(id, Some(&nodes[0].grpc));
        wait_ready(&http, &joined.url).await;
        nodes.push(joined);
    }
    let status = get_json(&http, &format!("{}/api/cluster", nodes[0].url)).await;
    let leader = status["leader"].as_u64().expect("a leader");
    let follower = (1..=3).find(|&id| id != leader).unwrap();

    let row = json!({
        "key": "TRACED_ROW",
        "type": "static",
        "auth": "public",
        "content": "# WHAT: a row written through a follower\n\n{}\n",
    });
    let response = http
        .post(format!(
            "{}/api/directory",
            nodes[follower as usize - 1].url
        ))
        .header("x-terminal-key", ADMIN)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);

    // Stopping flushes what each node still holds; the follower first, so the leader never
    // has to hand over.
    for id in [follower, 6 - follower - leader, leader] {
        stop(&mut nodes[id as usize - 1]);
    }
    let spans = collector.spans.lock().unwrap().clone();
    assert!(
        spans.iter().all(|s| s.service == "rowcall-node"),
        "{spans:#?}"
    );
    let in_trace: Vec<&Exported> = spans.iter().filter(|s| s.trace == TRACE).collect();
    let request = in_trace
        .iter()
        .find(|s| s.instance == follower.to_string() && s.name == "http")
        .unwrap_or_else(|| {
            panic!("the follower's request span is in the caller's trace: {spans:#?}")
        });
    assert_eq!(request.parent, CALLER_SPAN, "{request:?}");
    let forwarded = in_trace
        .iter()
        .find(|s| s.instance == leader.to_string() && s.name == "forwarded")
        .unwrap_or_else(|| {
            panic!("the leader's span of the forwarded write is in the trace: {spans:#?}")
        });
    assert_eq!(
        forwarded.parent, request.span,
        "the leader's span is a child of the follower's: {in_trace:#?}"
    );
    assert!(
        spans.iter().any(|s| s.trace != TRACE && s.name == "http"),
        "requests without a traceparent have traces of their own: {spans:#?}"
    );
}

/// A collector that is down costs the spans and nothing else: the node serves, and stops
/// on SIGTERM as usual.
#[tokio::test]
async fn a_node_whose_collector_is_down_serves_and_stops() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let args = ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"];
    let mut node = spawn(
        &[&args[..], &["--otlp-endpoint", &endpoint]].concat(),
        &dir.path().join("data"),
        None,
    );
    wait_ready(&http, &node.url).await;
    let asked = http
        .get(format!("{}/api/dispatch?ask=what+time+is+it", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 200);
    stop(&mut node);
}

/// An endpoint the node cannot export to is refused at start, with what it needs.
#[test]
fn a_node_refuses_an_endpoint_it_cannot_export_to() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_rowcall-node"))
        .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--otlp-endpoint", "collector:4317"])
        .arg("--data")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("http://HOST:PORT"), "{said}");
    assert!(
        !dir.path().join("data").exists(),
        "refused before the folder is made"
    );
}
