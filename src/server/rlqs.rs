//! The gRPC shell of RLQS: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/
//! StreamRateLimitQuotas`, on the gRPC port beside RLS. Each stream's reports are decoded,
//! answered by its `engine::rlqs::QuotaStream` against the rules in force, and encoded, as
//! are the assignments the stream pushes between reports when its buckets' shares move; a
//! malformed report or a bound reached ends that stream with a status saying which, and
//! shutdown ends every stream with UNAVAILABLE so Envoys reconnect elsewhere.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::rlqs_convert::{reports_from_wire, response_to_wire};
use crate::engine::limiter::Limiter;
use crate::engine::rlqs::{InForce, QuotaBoard, QuotaStream, ReportError, StreamAction};
use crate::engine::shutdown::Shutdown;
use crate::server::connections::streams::ConnectionStreams;
use crate::store::Store;
use crate::telemetry::rlqs as rlqs_metrics;

pub struct RateLimitQuotaGrpc<S> {
    limiter: Arc<Limiter<S>>,
    board: Arc<QuotaBoard>,
    shutdown: Shutdown,
}

impl<S: Store> RateLimitQuotaGrpc<S> {
    pub fn server(
        limiter: Arc<Limiter<S>>,
        board: Arc<QuotaBoard>,
        shutdown: Shutdown,
    ) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(Self {
            limiter,
            board,
            shutdown,
        })
    }
}

type Answers =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Store> RateLimitQuotaService for RateLimitQuotaGrpc<S> {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let max_per_connection = self.board.settings().max_streams_per_connection;
        let slot = match request.extensions().get::<ConnectionStreams>() {
            Some(streams) => Some(streams.open(max_per_connection).map_err(|open| {
                Status::resource_exhausted(format!(
                    "{open} RLQS streams are open on this connection, the bound \
                     (--rlqs-max-streams-per-connection): one Envoy needs one stream"
                ))
            })?),
            // Served without floodgate's listener (in-process tests): no connection to count.
            None => None,
        };
        let stream = self
            .board
            .open_stream()
            .map_err(|exhausted| Status::resource_exhausted(exhausted.to_string()))?;
        // Two answers in flight at most: a stream whose Envoy stops reading stops being read.
        let (answers, receiver) = mpsc::channel(2);
        let limiter = Arc::clone(&self.limiter);
        let (board, shutdown) = (Arc::clone(&self.board), self.shutdown.clone());
        let reports = request.into_inner();
        tokio::spawn(async move {
            // Counted on its connection until the stream ends.
            let _slot = slot;
            serve_stream(limiter, board, stream, reports, answers, shutdown).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

/// Where a stream's answers go: two in flight at most.
type AnswerSender = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// Whether a stream stays open after an answer.
enum Answered {
    Open,
    /// The Envoy stopped reading.
    Gone,
    /// The report ends the stream with this status.
    Refused(Status),
}

/// Reads `reports` until the Envoy ends the stream, an error ends it, or shutdown.
async fn serve_stream<S: Store>(
    limiter: Arc<Limiter<S>>,
    board: Arc<QuotaBoard>,
    mut stream: QuotaStream,
    mut reports: Streaming<RateLimitQuotaUsageReports>,
    answers: AnswerSender,
    shutdown: Shutdown,
) {
    let stop = shutdown.fired();
    tokio::pin!(stop);
    let counted = rlqs_metrics::stream_opened();
    loop {
        let message = tokio::select! {
            () = &mut stop => {
                let _ = answers
                    .send(Err(Status::unavailable("floodgate is shutting down: reconnect")))
                    .await;
                counted.close("shutdown");
                return;
            }
            () = answers.closed() => return,
            () = stream.push_due() => match send_pushes(&mut stream, &answers).await {
                Answered::Open => continue,
                Answered::Gone | Answered::Refused(_) => return,
            },
            message = reports.message() => message,
        };
        let report = match message {
            Ok(Some(report)) => report,
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(%status, "an RLQS stream ended with an error from its client");
                return;
            }
        };
        match answer_report(&limiter, &board, &mut stream, report, &answers).await {
            Answered::Open => {}
            Answered::Gone => return,
            Answered::Refused(status) => {
                counted.close(match status.code() {
                    tonic::Code::ResourceExhausted => "resource_exhausted",
                    _ => "invalid_argument",
                });
                let _ = answers.send(Err(status)).await;
                return;
            }
        }
    }
}

/// Sends the assignments `stream` pushes now that its buckets' shares moved, if any.
async fn send_pushes(stream: &mut QuotaStream, answers: &AnswerSender) -> Answered {
    let actions = stream.pushes(Instant::now());
    if actions.is_empty() {
        return Answered::Open;
    }
    rlqs_metrics::pushed(actions.len());
    match answers.send(Ok(response_to_wire(actions))).await {
        Ok(()) => Answered::Open,
        Err(_) => Answered::Gone,
    }
}

/// Answers one usage report against the rules and adjustments in force.
async fn answer_report<S: Store>(
    limiter: &Limiter<S>,
    board: &QuotaBoard,
    stream: &mut QuotaStream,
    report: RateLimitQuotaUsageReports,
    answers: &AnswerSender,
) -> Answered {
    let (domain, usages) = reports_from_wire(report);
    if stream.domain().is_none() {
        tracing::info!(%domain, "RLQS stream opened");
    }
    tracing::debug!(buckets = usages.len(), "RLQS usage report");
    let rules = limiter.rules();
    let adjustments = limiter.adjustments();
    let snapshot = adjustments.snapshot();
    let in_force = InForce {
        rules: &rules,
        adjustments: &snapshot,
        now_unix_ms: adjustments.now_unix_ms(),
    };
    match stream.report(&domain, &usages, in_force, Instant::now()) {
        Ok(_) if usages.is_empty() => Answered::Open,
        Ok(actions) => {
            let abandoned = actions
                .iter()
                .filter(|action| matches!(action, StreamAction::Abandon { .. }))
                .count();
            rlqs_metrics::report_answered(abandoned, board.all_buckets());
            // Nothing to send while every bucket of the report is held (engine::rlqs).
            if !actions.is_empty() && answers.send(Ok(response_to_wire(actions))).await.is_err() {
                return Answered::Gone;
            }
            Answered::Open
        }
        Err(error) => {
            tracing::warn!(
                domain = stream.domain().unwrap_or(&domain),
                %error,
                "RLQS stream closed"
            );
            Answered::Refused(report_status(&error))
        }
    }
}

fn report_status(error: &ReportError) -> Status {
    match error {
        ReportError::TooManyStreamBuckets { .. } | ReportError::TooManyDomainBuckets { .. } => {
            Status::resource_exhausted(error.to_string())
        }
        ReportError::MissingDomain
        | ReportError::DomainChanged { .. }
        | ReportError::Bucket { .. } => Status::invalid_argument(error.to_string()),
    }
}
