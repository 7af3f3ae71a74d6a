//! The ext_proc answers the picker sends: continue, the destination
//! (headers, dynamic metadata, the body handed back), an immediate error.

use std::collections::HashMap;

use super::wire::processing_response::Response;
use super::wire::value::Kind;
use super::wire::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeaderValue, HeaderValueOption,
    HeadersResponse, HttpStatus, ImmediateResponse, ProcessingResponse, StreamedBodyResponse,
    Struct, TrailersResponse, Value, body_mutation,
};
use crate::error::ApiError;
use protocol::headers::PREFILLER_HEADER;

/// The header (and metadata key) that names the chosen endpoints.
pub use protocol::headers::DESTINATION_HEADER as DESTINATION_KEY;
/// The dynamic metadata namespace of the destination.
pub const DESTINATION_NAMESPACE: &str = "envoy.lb";
/// Largest body piece handed back in one message (as GIE's picker does:
/// well under gRPC's default 4 MiB message cap).
const BODY_PIECE: usize = 62 * 1024;

/// Which message of the HTTP exchange an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    RequestHeaders,
    RequestBody,
    RequestTrailers,
    ResponseHeaders,
    ResponseBody,
    ResponseTrailers,
}

fn wrap(phase: Phase, common: Option<CommonResponse>) -> ProcessingResponse {
    let headers = || HeadersResponse {
        response: common.clone(),
    };
    let body = || BodyResponse {
        response: common.clone(),
    };
    let response = match phase {
        Phase::RequestHeaders => Response::RequestHeaders(headers()),
        Phase::ResponseHeaders => Response::ResponseHeaders(headers()),
        Phase::RequestBody => Response::RequestBody(body()),
        Phase::ResponseBody => Response::ResponseBody(body()),
        Phase::RequestTrailers => Response::RequestTrailers(TrailersResponse::default()),
        Phase::ResponseTrailers => Response::ResponseTrailers(TrailersResponse::default()),
    };
    ProcessingResponse {
        response: Some(response),
        ..ProcessingResponse::default()
    }
}

/// Go on unchanged.
pub fn proceed(phase: Phase) -> ProcessingResponse {
    wrap(phase, None)
}

/// The destination: `endpoints` (`ip:port`, best first) set as the header
/// and as `envoy.lb` dynamic metadata, the same value in both (the
/// protocol forbids two), with the route cache cleared so that the header
/// is seen by routing. Sent as the answer to `phase`: the request's
/// headers, or its body when that was buffered (then Envoy applies the
/// header mutation before forwarding). A disaggregated request's prefill
/// worker (`ip:port`) goes in [`PREFILLER_HEADER`] for the decode worker's
/// sidecar; every other reserved header (`protocol::headers::RESERVED`) a
/// client sent is removed, so that no client can point the sidecar at a
/// host of its choosing. `body_len`: the length of a body handed back
/// changed (a field only the router sets was taken out of it), set as the
/// request's `content-length`.
pub fn destination(
    phase: Phase,
    endpoints: &[String],
    prefill: Option<&str>,
    body_len: Option<usize>,
) -> ProcessingResponse {
    let value = endpoints.join(",");
    let mut set_headers = vec![header(DESTINATION_KEY, &value)];
    if let Some(p) = prefill {
        set_headers.push(header(PREFILLER_HEADER, p));
    }
    if let Some(len) = body_len {
        set_headers.push(header("content-length", &len.to_string()));
    }
    let remove_headers = protocol::headers::RESERVED
        .iter()
        .filter(|r| **r != DESTINATION_KEY && (prefill.is_none() || **r != PREFILLER_HEADER))
        .map(|r| (*r).to_owned())
        .collect();
    let common = CommonResponse {
        header_mutation: Some(HeaderMutation {
            set_headers,
            remove_headers,
        }),
        clear_route_cache: true,
        ..CommonResponse::default()
    };
    let mut answer = wrap(phase, Some(common));
    answer.dynamic_metadata = Some(namespace(
        DESTINATION_NAMESPACE,
        [(DESTINATION_KEY, string(value))],
    ));
    answer
}

/// Replaces the buffered request body `answer` lets through with `body`.
pub fn set_body(answer: &mut ProcessingResponse, body: &[u8]) {
    if let Some(Response::RequestBody(BodyResponse {
        response: Some(common),
    })) = answer.response.as_mut()
    {
        common.body_mutation = Some(BodyMutation {
            mutation: Some(body_mutation::Mutation::Body(body.to_vec())),
        });
    }
}

/// The body handed back in full-duplex streamed mode, where Envoy forwards
/// only what the processor returns: in pieces, the last marked as the end.
pub fn body_pieces(phase: Phase, body: &[u8], end_of_stream: bool) -> Vec<ProcessingResponse> {
    let mut pieces: Vec<&[u8]> = body.chunks(BODY_PIECE).collect();
    if pieces.is_empty() {
        pieces.push(&[]);
    }
    let last = pieces.len() - 1;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let common = CommonResponse {
                body_mutation: Some(BodyMutation {
                    mutation: Some(body_mutation::Mutation::StreamedResponse(
                        StreamedBodyResponse {
                            body: piece.to_vec(),
                            end_of_stream: end_of_stream && i == last,
                        },
                    )),
                }),
                ..CommonResponse::default()
            };
            wrap(phase, Some(common))
        })
        .collect()
}

/// Answers the client at once with `error` (status and the router's JSON
/// error body); the request goes nowhere.
pub fn immediate(error: &ApiError) -> ProcessingResponse {
    let body = error.body();
    let mut set_headers = vec![header("content-type", "application/json")];
    for (name, value) in error.headers.iter().flat_map(|h| h.iter()) {
        if let Ok(value) = value.to_str() {
            set_headers.push(header(name.as_str(), value));
        }
    }
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus {
                code: i32::from(error.status.as_u16()),
            }),
            headers: Some(HeaderMutation {
                set_headers,
                remove_headers: Vec::new(),
            }),
            body: body.to_string().into_bytes(),
            details: format!("prefix_router_{}", error.kind),
        })),
        ..ProcessingResponse::default()
    }
}

fn header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_owned(),
            raw_value: value.as_bytes().to_vec(),
            ..HeaderValue::default()
        }),
    }
}

fn string(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}

fn namespace<const N: usize>(name: &str, fields: [(&str, Value); N]) -> Struct {
    let inner = Struct {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<HashMap<_, _>>(),
    };
    Struct {
        fields: HashMap::from([(
            name.to_owned(),
            Value {
                kind: Some(Kind::StructValue(inner)),
            },
        )]),
    }
}
