//! A limiter served on free loopback ports in this process, with a gRPC client to it.

use std::sync::Arc;

use floodgate::engine::limiter::Limiter;
use floodgate::engine::shutdown;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::server::{serve_with, HttpSettings, Listeners, Operations};
use floodgate::store::memory::MemoryStore;
use tokio::net::TcpListener;
use tonic::transport::Channel;

/// The server's client, what stops it and its task.
pub struct Served {
    pub client: RateLimitServiceClient<Channel>,
    /// `http://127.0.0.1:{port}` of the gRPC listener, for other clients.
    pub url: String,
    pub trigger: shutdown::ShutdownTrigger,
    pub task: tokio::task::JoinHandle<()>,
}

/// Serves `limiter` (gRPC, HTTP and debug on free ports) until `trigger` fires.
pub async fn serve_limiter(limiter: Arc<Limiter<MemoryStore>>) -> Served {
    serve_limiter_with(limiter, Operations::default()).await
}

/// [`serve_limiter`] with `operations` (a Limitador, overrides…) beside the limiter.
pub async fn serve_limiter_with(
    limiter: Arc<Limiter<MemoryStore>>,
    operations: Operations,
) -> Served {
    let bind = || async {
        TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|error| panic!("bind: {error}"))
    };
    let grpc = bind().await;
    let port = grpc.local_addr().map(|a| a.port()).unwrap_or_default();
    let listeners = Listeners {
        grpc,
        http: bind().await,
        debug: bind().await,
        debug_pages: None,
    };
    let (trigger, shutdown) = shutdown::channel();
    let task = tokio::spawn(async move {
        let served = serve_with(
            limiter,
            listeners,
            HttpSettings::default(),
            shutdown,
            operations,
        );
        if let Err(error) = served.await {
            panic!("server failed: {error}");
        }
    });
    let url = format!("http://127.0.0.1:{port}");
    let client = RateLimitServiceClient::connect(url.clone())
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    Served {
        client,
        url,
        trigger,
        task,
    }
}
