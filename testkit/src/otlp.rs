//! A real OTLP/gRPC trace receiver on a loopback port: the collector's
//! `opentelemetry.proto.collector.trace.v1.TraceService/Export`, keeping every span it gets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
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
}

struct Collector(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
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
        if let Ok(mut spans) = self.0.spans.lock() {
            spans.extend(received);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The receiver; stops serving when dropped.
pub struct OtlpReceiver {
    pub port: u16,
    received: Arc<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|error| panic!("cannot bind the OTLP receiver: {error}"));
        let port = listener
            .local_addr()
            .map(|addr| addr.port())
            .unwrap_or_else(|error| panic!("no local address: {error}"));
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
