//! A limiter served on free loopback ports in this process, with a gRPC client to it.

use std::sync::Arc;

use floodgate::engine::limiter::Limiter;
use floodgate::engine::shutdown;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::server::{serve, HttpSettings, Listeners};
use floodgate::store::memory::MemoryStore;
use tokio::net::TcpListener;
use tonic::transport::Channel;

/// The server's client, what stops it and its task.
pub struct Served {
    pub client: RateLimitServiceClient<Channel>,
    pub trigger: shutdown::ShutdownTrigger,
    pub task: tokio::task::JoinHandle<()>,
}

/// Serves `limiter` (gRPC, HTTP and debug on free ports) until `trigger` fires.
pub async fn serve_limiter(limiter: Arc<Limiter<MemoryStore>>) -> Served {
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
        if let Err(error) = serve(limiter, listeners, HttpSettings::default(), shutdown).await {
            panic!("server failed: {error}");
        }
    });
    let client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    Served {
        client,
        trigger,
        task,
    }
}
