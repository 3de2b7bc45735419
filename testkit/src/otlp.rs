//! A real OTLP trace receiver on a loopback port, keeping every span it gets: over gRPC (the
//! collector's `opentelemetry.proto.collector.trace.v1.TraceService/Export`) or over HTTP
//! (protobuf posted to `/v1/traces`, OTLP/HTTP).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// A span as received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub span: Span,
    pub resource: HashMap<String, Value>,
}

impl ReceivedSpan {
    pub fn trace_id_hex(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_span_id_hex(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    pub fn attribute(&self, key: &str) -> Option<&Value> {
        attribute(&self.span.attributes, key)
    }

    pub fn string(&self, key: &str) -> Option<&str> {
        match self.attribute(key)? {
            Value::StringValue(text) => Some(text),
            _ => None,
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attribute(key)? {
            Value::IntValue(number) => Some(*number),
            _ => None,
        }
    }

    pub fn double(&self, key: &str) -> Option<f64> {
        match self.attribute(key)? {
            Value::DoubleValue(number) => Some(*number),
            _ => None,
        }
    }
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|value| value.value.as_ref())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
    /// The paths spans were posted to (OTLP/HTTP).
    paths: Mutex<Vec<String>>,
}

impl Received {
    fn keep(&self, request: ExportTraceServiceRequest) {
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let resource: HashMap<String, Value> = resource_spans
                .resource
                .map(|resource| resource.attributes)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|kv| Some((kv.key, kv.value?.value?)))
                .collect();
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    received.push(ReceivedSpan {
                        span,
                        resource: resource.clone(),
                    });
                }
            }
        }
        if let Ok(mut spans) = self.spans.lock() {
            spans.extend(received);
        }
    }
}

struct Collector(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// One OTLP/HTTP export: a protobuf `ExportTraceServiceRequest` posted; answered with an empty
/// `ExportTraceServiceResponse`, or 400 for a body that is not one.
async fn export_over_http(
    received: Arc<Received>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
    if let Ok(mut paths) = received.paths.lock() {
        paths.push(request.uri().path().to_owned());
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(http_answer(400, Bytes::new())),
    };
    match ExportTraceServiceRequest::decode(body) {
        Ok(export) => {
            received.keep(export);
            let answer = ExportTraceServiceResponse::default().encode_to_vec();
            Ok(http_answer(200, Bytes::from(answer)))
        }
        Err(_) => Ok(http_answer(400, Bytes::new())),
    }
}

fn http_answer(status: u16, body: Bytes) -> hyper::Response<Full<Bytes>> {
    let mut answer = hyper::Response::new(Full::new(body));
    *answer.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_REQUEST);
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    answer
}

/// The receiver; stops serving when dropped.
pub struct OtlpReceiver {
    pub port: u16,
    received: Arc<Received>,
    task: tokio::task::JoinHandle<()>,
}

/// A loopback listener and its port.
async fn listen() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|error| panic!("cannot bind the OTLP receiver: {error}"));
    let port = listener
        .local_addr()
        .map(|addr| addr.port())
        .unwrap_or_else(|error| panic!("no local address: {error}"));
    (listener, port)
}

impl OtlpReceiver {
    /// An OTLP/HTTP receiver: spans posted to any path (`paths` says which).
    pub async fn start_http() -> OtlpReceiver {
        let (listener, port) = listen().await;
        let received = Arc::new(Received::default());
        let shared = Arc::clone(&received);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let received = Arc::clone(&shared);
                let service =
                    service_fn(move |request| export_over_http(Arc::clone(&received), request));
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver {
            port,
            received,
            task,
        }
    }

    /// The paths spans were posted to, in order (OTLP/HTTP).
    pub fn paths(&self) -> Vec<String> {
        self.received
            .paths
            .lock()
            .map(|paths| paths.clone())
            .unwrap_or_default()
    }

    /// An OTLP/gRPC receiver.
    pub async fn start() -> OtlpReceiver {
        let (listener, port) = listen().await;
        let received = Arc::new(Received::default());
        let service = TraceServiceServer::new(Collector(Arc::clone(&received)));
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        OtlpReceiver {
            port,
            received,
            task,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received
            .spans
            .lock()
            .map(|spans| spans.clone())
            .unwrap_or_default()
    }

    /// Waits until `done` holds for the spans received so far, or `timeout` passes; returns
    /// the spans either way.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
