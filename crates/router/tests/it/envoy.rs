//! Envoy's side of an ext_proc stream, for the endpoint picker's tests:
//! the messages it sends and the reading of the picker's answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use prefix_router::ext_proc::processing_request::Request;
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::ext_proc::value::Kind;
use prefix_router::ext_proc::{
    BodySendMode, CommonResponse, HeaderMap, HeaderValue, HttpBody, HttpHeaders, ListValue,
    Metadata, PROCESS_PATH, ProcessingRequest, ProcessingResponse, ProtocolConfiguration, Struct,
    Value, body_mutation,
};
use serde_json::Value as Json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;

/// The header (and `envoy.lb` metadata key) of the destination.
pub const DESTINATION: &str = "x-gateway-destination-endpoint";

/// One ext_proc stream, as Envoy holds it for one HTTP request.
pub struct Envoy {
    pub tx: Option<mpsc::Sender<ProcessingRequest>>,
    pub rx: tonic::Streaming<ProcessingResponse>,
}

impl Envoy {
    pub async fn open(grpc: SocketAddr) -> Envoy {
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Envoy::over(channel).await
    }

    /// A stream over `channel` (one connection carries many streams, as
    /// Envoy's do).
    pub async fn over(channel: tonic::transport::Channel) -> Envoy {
        let (tx, rx) = mpsc::channel(16);
        Envoy {
            tx: Some(tx),
            rx: process(channel, rx).await.unwrap(),
        }
    }

    pub async fn send(&self, message: ProcessingRequest) {
        self.tx.as_ref().unwrap().send(message).await.unwrap();
    }

    pub async fn recv(&mut self) -> ProcessingResponse {
        tokio::time::timeout(Duration::from_secs(20), self.rx.message())
            .await
            .expect("an answer within 20 s")
            .expect("a healthy stream")
            .expect("an answer, not the end of the stream")
    }

    /// True when the picker ended the stream.
    pub async fn ended(&mut self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(20), self.rx.message()).await,
            Ok(Ok(None))
        )
    }

    /// Ends the stream from Envoy's side (the HTTP request is over).
    pub async fn close(mut self) {
        self.tx.take();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.rx.message()).await;
    }
}

/// Calls the picker's `Process` method over `channel` (Envoy's client side
/// of the stream): sends what `rx` yields, returns the answers' stream, or
/// the status the picker refused the stream with.
pub async fn process(
    channel: tonic::transport::Channel,
    rx: mpsc::Receiver<ProcessingRequest>,
) -> Result<tonic::Streaming<ProcessingResponse>, tonic::Status> {
    let mut client = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    client
        .ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let answers = client
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            PathAndQuery::from_static(PROCESS_PATH),
            tonic_prost::ProstCodec::<ProcessingRequest, ProcessingResponse>::default(),
        )
        .await?;
    Ok(answers.into_inner())
}

pub fn headers_of(pairs: &[(&str, &str)]) -> HeaderMap {
    HeaderMap {
        headers: pairs
            .iter()
            .map(|(k, v)| HeaderValue {
                key: (*k).into(),
                raw_value: v.as_bytes().to_vec(),
                ..HeaderValue::default()
            })
            .collect(),
    }
}

pub fn modes(request: BodySendMode, response: BodySendMode) -> Option<ProtocolConfiguration> {
    Some(ProtocolConfiguration {
        request_body_mode: request as i32,
        response_body_mode: response as i32,
    })
}

pub fn request_headers(
    path: &str,
    end_of_stream: bool,
    config: Option<ProtocolConfiguration>,
    metadata: Option<Metadata>,
) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(headers_of(&[
                (":method", "POST"),
                (":path", path),
                ("content-type", "application/json"),
            ])),
            end_of_stream,
        })),
        protocol_config: config,
        metadata_context: metadata,
    }
}

/// A POST's headers for `path` with the client's own `extra` headers (its
/// key, trace context), the body to follow; the modes named when `config`.
pub fn client_request(
    path: &str,
    extra: &[(&str, &str)],
    config: Option<ProtocolConfiguration>,
) -> ProcessingRequest {
    let mut pairs = vec![(":method", "POST"), (":path", path)];
    pairs.extend_from_slice(extra);
    ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(headers_of(&pairs)),
            ..HttpHeaders::default()
        })),
        protocol_config: config,
        ..ProcessingRequest::default()
    }
}

pub fn request_body(body: &[u8], end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody {
            body: body.to_vec(),
            end_of_stream,
        })),
        ..ProcessingRequest::default()
    }
}

pub fn response_headers(status: &str, served: Option<&str>) -> ProcessingRequest {
    let metadata = served.map(|s| {
        namespace(
            "envoy.lb",
            "x-gateway-destination-endpoint-served",
            string(s),
        )
    });
    ProcessingRequest {
        request: Some(Request::ResponseHeaders(HttpHeaders {
            headers: Some(headers_of(&[(":status", status)])),
            ..HttpHeaders::default()
        })),
        metadata_context: metadata,
        ..ProcessingRequest::default()
    }
}

pub fn response_body(body: &[u8], end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::ResponseBody(HttpBody {
            body: body.to_vec(),
            end_of_stream,
        })),
        ..ProcessingRequest::default()
    }
}

pub fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

pub fn namespace(name: &str, key: &str, value: Value) -> Metadata {
    Metadata {
        filter_metadata: HashMap::from([(
            name.to_owned(),
            Struct {
                fields: HashMap::from([(key.to_owned(), value)]),
            },
        )]),
    }
}

pub fn subset(endpoints: &[&str]) -> Metadata {
    let list = Value {
        kind: Some(Kind::ListValue(ListValue {
            values: endpoints.iter().map(|e| string(e)).collect(),
        })),
    };
    namespace(
        "envoy.lb.subset_hint",
        "x-gateway-destination-endpoint-subset",
        list,
    )
}

pub fn common(answer: &ProcessingResponse) -> Option<&CommonResponse> {
    match answer.response.as_ref()? {
        Response::RequestHeaders(h) | Response::ResponseHeaders(h) => h.response.as_ref(),
        Response::RequestBody(b) | Response::ResponseBody(b) => b.response.as_ref(),
        _ => None,
    }
}

/// The destination an answer sets: the header's value, checked equal to
/// the `envoy.lb` dynamic metadata's (the protocol forbids two values).
pub fn destination(answer: &ProcessingResponse) -> Vec<String> {
    let common = common(answer).expect("a headers or body answer");
    assert!(common.clear_route_cache, "the route cache is cleared");
    let mutation = common.header_mutation.as_ref().expect("a header mutation");
    let header = mutation
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == DESTINATION)
        .expect("the destination header");
    let value = String::from_utf8(header.raw_value.clone()).unwrap();
    let metadata = answer.dynamic_metadata.as_ref().expect("dynamic metadata");
    let Some(Kind::StructValue(lb)) = &metadata.fields["envoy.lb"].kind else {
        panic!("envoy.lb is a struct");
    };
    let Some(Kind::StringValue(meta)) = &lb.fields[DESTINATION].kind else {
        panic!("the destination metadata is a string");
    };
    assert_eq!(&value, meta, "header and metadata agree");
    value.split(',').map(str::to_owned).collect()
}

/// The body handed back in streamed pieces, and whether the last ended it.
pub fn handed_back(answers: &[ProcessingResponse]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let mut ended = false;
    for a in answers {
        let mutation = common(a).and_then(|c| c.body_mutation.as_ref());
        let Some(body_mutation::Mutation::StreamedResponse(piece)) =
            mutation.and_then(|m| m.mutation.as_ref())
        else {
            panic!("a streamed body piece, got {a:?}");
        };
        assert!(!ended, "nothing after the end");
        body.extend_from_slice(&piece.body);
        ended = piece.end_of_stream;
    }
    (body, ended)
}

pub fn immediate(answer: &ProcessingResponse) -> (i32, Json) {
    let Some(Response::ImmediateResponse(r)) = &answer.response else {
        panic!("an immediate response, got {answer:?}");
    };
    let body: Json = serde_json::from_slice(&r.body).expect("a JSON error body");
    (r.status.as_ref().unwrap().code, body)
}

/// The full-duplex exchange of one completion up to the pick: headers and
/// body sent without waiting (Envoy's modes named in the first message when
/// `config`), then the headers' answer, which carries the destination, is
/// returned once the body is handed back whole.
pub async fn exchange_duplex(
    envoy: &mut Envoy,
    body: &[u8],
    config: bool,
    metadata: Option<Metadata>,
) -> ProcessingResponse {
    let (headers, handed) = exchange_duplex_handing_back(envoy, body, config, metadata).await;
    assert_eq!(handed, body, "the body is handed back whole");
    headers
}

/// As [`exchange_duplex`]: the headers' answer and the body handed back.
pub async fn exchange_duplex_handing_back(
    envoy: &mut Envoy,
    body: &[u8],
    config: bool,
    metadata: Option<Metadata>,
) -> (ProcessingResponse, Vec<u8>) {
    let config = config
        .then(|| {
            modes(
                BodySendMode::FullDuplexStreamed,
                BodySendMode::FullDuplexStreamed,
            )
        })
        .flatten();
    envoy
        .send(request_headers("/v1/completions", false, config, metadata))
        .await;
    let (first, rest) = body.split_at(body.len() / 2);
    envoy.send(request_body(first, false)).await;
    envoy.send(request_body(rest, true)).await;
    let headers = envoy.recv().await;
    assert!(
        matches!(headers.response, Some(Response::RequestHeaders(_))),
        "the headers are answered first: {headers:?}"
    );
    let mut pieces = Vec::new();
    loop {
        let piece = envoy.recv().await;
        pieces.push(piece);
        if handed_back(&pieces).1 {
            break;
        }
    }
    (headers, handed_back(&pieces).0)
}

/// A stream in buffered mode for a completion whose headers were sent and
/// answered (the body is the caller's to send).
pub async fn open_buffered(grpc: SocketAddr) -> Envoy {
    let mut envoy = Envoy::open(grpc).await;
    let config = modes(BodySendMode::Buffered, BodySendMode::None);
    envoy
        .send(request_headers("/v1/completions", false, config, None))
        .await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::RequestHeaders(_))
    ));
    envoy
}

/// The value a header mutation of `answer` sets for `name`, if any, and
/// whether it removes `name`.
pub fn header_set(answer: &ProcessingResponse, name: &str) -> (Option<String>, bool) {
    let Some(mutation) = common(answer).and_then(|c| c.header_mutation.as_ref()) else {
        return (None, false);
    };
    let set = mutation
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| String::from_utf8(h.raw_value.clone()).unwrap());
    (set, mutation.remove_headers.iter().any(|h| h == name))
}
