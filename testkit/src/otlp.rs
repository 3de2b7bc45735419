//! A real OTLP trace receiver on a loopback port, keeping every span it gets: over gRPC (the
//! collector's `opentelemetry.proto.collector.trace.v1.TraceService/Export`) or over HTTP
//! (protobuf posted to `/v1/traces`, OTLP/HTTP); in plain text or over TLS (optionally asking
//! for a client certificate), taking gzip bodies as a collector does.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flate2::read::GzDecoder;

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
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::testca::Pair;

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
    /// Each export's body encoding (`content-encoding` or `grpc-encoding`), `identity` if none.
    encodings: Mutex<Vec<String>>,
}

impl Received {
    fn note_encoding(&self, encoding: Option<&str>) {
        if let Ok(mut encodings) = self.encodings.lock() {
            encodings.push(encoding.unwrap_or("identity").to_owned());
        }
    }

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
        let encoding = request.metadata().get("grpc-encoding");
        self.0
            .note_encoding(encoding.and_then(|value| value.to_str().ok()));
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
    let encoding = request
        .headers()
        .get(hyper::header::CONTENT_ENCODING)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    received.note_encoding(encoding.as_deref());
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(http_answer(400, Bytes::new())),
    };
    let body = match encoding.as_deref() {
        None | Some("identity") => body,
        Some("gzip") => {
            let mut plain = Vec::new();
            if GzDecoder::new(&body[..]).read_to_end(&mut plain).is_err() {
                return Ok(http_answer(400, Bytes::new()));
            }
            Bytes::from(plain)
        }
        Some(_) => return Ok(http_answer(415, Bytes::new())),
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

/// A receiver's TLS: its certificate, and the CA a client must show a certificate of (none: no
/// client certificate asked for).
pub struct ReceiverTls<'a> {
    pub server: &'a Pair,
    pub client_ca: Option<&'a str>,
}

impl ReceiverTls<'_> {
    fn acceptor(&self) -> TlsAcceptor {
        let provider = Arc::new(default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|error| panic!("TLS versions: {error}"));
        let builder = match self.client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(
                    CertificateDer::pem_slice_iter(ca.as_bytes()).flatten(),
                );
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap_or_else(|error| panic!("client verifier: {error}"));
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let chain = CertificateDer::pem_slice_iter(self.server.cert.as_bytes())
            .flatten()
            .collect();
        let key = PrivateKeyDer::from_pem_slice(self.server.key.as_bytes())
            .unwrap_or_else(|error| panic!("server key: {error}"));
        let config = builder
            .with_single_cert(chain, key)
            .unwrap_or_else(|error| panic!("server certificate: {error}"));
        TlsAcceptor::from(Arc::new(config))
    }

    fn tonic(&self) -> ServerTlsConfig {
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.server.cert, &self.server.key));
        match self.client_ca {
            Some(ca) => tls.client_ca_root(Certificate::from_pem(ca)),
            None => tls,
        }
    }
}

/// The receiver; stops serving when dropped.
pub struct OtlpReceiver {
    pub port: u16,
    received: Arc<Received>,
    task: tokio::task::JoinHandle<()>,
    secure: bool,
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
        Self::start_http_on(None).await
    }

    /// An OTLP/HTTP receiver over TLS.
    pub async fn start_https(tls: &ReceiverTls<'_>) -> OtlpReceiver {
        Self::start_http_on(Some(tls.acceptor())).await
    }

    async fn start_http_on(acceptor: Option<TlsAcceptor>) -> OtlpReceiver {
        let (listener, port) = listen().await;
        let received = Arc::new(Received::default());
        let shared = Arc::clone(&received);
        let secure = acceptor.is_some();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let received = Arc::clone(&shared);
                let service =
                    service_fn(move |request| export_over_http(Arc::clone(&received), request));
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        });
        OtlpReceiver {
            port,
            received,
            task,
            secure,
        }
    }

    /// Each export's body encoding, in order (`identity` when none was named).
    pub fn encodings(&self) -> Vec<String> {
        self.received
            .encodings
            .lock()
            .map(|encodings| encodings.clone())
            .unwrap_or_default()
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
        Self::start_grpc_on(None).await
    }

    /// An OTLP/gRPC receiver over TLS.
    pub async fn start_grpc_tls(tls: &ReceiverTls<'_>) -> OtlpReceiver {
        Self::start_grpc_on(Some(tls.tonic())).await
    }

    async fn start_grpc_on(tls: Option<ServerTlsConfig>) -> OtlpReceiver {
        let (listener, port) = listen().await;
        let received = Arc::new(Received::default());
        let service = TraceServiceServer::new(Collector(Arc::clone(&received)))
            .accept_compressed(CompressionEncoding::Gzip);
        let secure = tls.is_some();
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            server = server
                .tls_config(tls)
                .unwrap_or_else(|error| panic!("receiver TLS: {error}"));
        }
        let task = tokio::spawn(async move {
            let _ = server
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        OtlpReceiver {
            port,
            received,
            task,
            secure,
        }
    }

    /// `http://127.0.0.1:port`, or `https://…` over TLS (the test CA's server certificate names
    /// 127.0.0.1).
    pub fn endpoint(&self) -> String {
        let scheme = if self.secure { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
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
