//! The `envoy.service.ext_proc.v3.ExternalProcessor` gRPC service: its one
//! method, `Process`, a bidirectional stream of [`ProcessingRequest`] in
//! and [`ProcessingResponse`] out, served over tonic with prost's codec.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, StdError, http};
use tonic::server::{Grpc, NamedService};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use super::messages::{ProcessingRequest, ProcessingResponse};

/// The gRPC service's name.
const SERVICE_NAME: &str = "envoy.service.ext_proc.v3.ExternalProcessor";
/// The path of the `Process` method (what a client calls).
pub const PROCESS_PATH: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

/// The answers of one stream.
pub type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

/// What handles each `Process` stream: takes Envoy's messages, returns
/// the answers (or refuses the stream with a status).
pub trait Processor: Send + Sync + 'static {
    fn process(&self, inbound: Streaming<ProcessingRequest>) -> Result<ResponseStream, Status>;
}

/// The service, to add to a `tonic::transport::Server`.
pub struct ExternalProcessorServer<P> {
    processor: Arc<P>,
    max_decoding_message_size: Option<usize>,
    max_encoding_message_size: Option<usize>,
}

impl<P> ExternalProcessorServer<P> {
    pub fn from_arc(processor: Arc<P>) -> Self {
        ExternalProcessorServer {
            processor,
            max_decoding_message_size: None,
            max_encoding_message_size: None,
        }
    }

    /// Largest message accepted from Envoy (tonic's default: 4 MiB).
    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = Some(limit);
        self
    }

    /// Largest answer sent.
    #[must_use]
    pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
        self.max_encoding_message_size = Some(limit);
        self
    }
}

impl<P> Clone for ExternalProcessorServer<P> {
    fn clone(&self) -> Self {
        ExternalProcessorServer {
            processor: self.processor.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
            max_encoding_message_size: self.max_encoding_message_size,
        }
    }
}

impl<P> NamedService for ExternalProcessorServer<P> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<P, B> Service<http::Request<B>> for ExternalProcessorServer<P>
where
    P: Processor,
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != PROCESS_PATH {
            return Box::pin(ready(Ok(unimplemented())));
        }
        let method = Process(self.processor.clone());
        let mut grpc = Grpc::new(ProstCodec::<ProcessingResponse, ProcessingRequest>::default())
            .apply_max_message_size_config(
                self.max_decoding_message_size,
                self.max_encoding_message_size,
            );
        Box::pin(async move { Ok(grpc.streaming(method, req).await) })
    }
}

/// The `Process` method of one call.
struct Process<P>(Arc<P>);

impl<P: Processor> Service<Request<Streaming<ProcessingRequest>>> for Process<P> {
    type Response = Response<ResponseStream>;
    type Error = Status;
    type Future = Ready<Result<Self::Response, Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Streaming<ProcessingRequest>>) -> Self::Future {
        ready(self.0.process(request.into_inner()).map(Response::new))
    }
}

/// The answer to a method this service lacks: gRPC's UNIMPLEMENTED.
fn unimplemented() -> http::Response<Body> {
    let mut response = http::Response::new(Body::default());
    let headers = response.headers_mut();
    headers.insert(Status::GRPC_STATUS, (Code::Unimplemented as i32).into());
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}
