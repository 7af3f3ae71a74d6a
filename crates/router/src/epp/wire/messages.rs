//! `envoy.service.ext_proc.v3`'s messages: what Envoy sends for each
//! part of an HTTP exchange ([`ProcessingRequest`]) and the picker's
//! answers ([`ProcessingResponse`]).

use super::core::{HeaderMap, HeaderValueOption, HttpStatus, Metadata, Struct};

/// One message from Envoy: a part of the HTTP exchange, with the stream's
/// metadata and (first message) its processing modes.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ProcessingRequest {
    #[prost(message, optional, tag = "8")]
    pub metadata_context: Option<Metadata>,
    #[prost(message, optional, tag = "11")]
    pub protocol_config: Option<ProtocolConfiguration>,
    #[prost(oneof = "processing_request::Request", tags = "2, 3, 4, 5, 6, 7")]
    pub request: Option<processing_request::Request>,
}

/// The parts of a [`ProcessingRequest`].
pub mod processing_request {
    /// Which part of the HTTP exchange a message carries.
    #[derive(Clone, PartialEq, ::prost::Oneof)]
    pub enum Request {
        #[prost(message, tag = "2")]
        RequestHeaders(super::HttpHeaders),
        #[prost(message, tag = "3")]
        ResponseHeaders(super::HttpHeaders),
        #[prost(message, tag = "4")]
        RequestBody(super::HttpBody),
        #[prost(message, tag = "5")]
        ResponseBody(super::HttpBody),
        #[prost(message, tag = "6")]
        RequestTrailers(super::HttpTrailers),
        #[prost(message, tag = "7")]
        ResponseTrailers(super::HttpTrailers),
    }
}

/// The body modes Envoy uses in this stream (values of
/// [`BodySendMode`](super::BodySendMode)).
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct ProtocolConfiguration {
    #[prost(int32, tag = "1")]
    pub request_body_mode: i32,
    #[prost(int32, tag = "2")]
    pub response_body_mode: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HttpHeaders {
    #[prost(message, optional, tag = "1")]
    pub headers: Option<HeaderMap>,
    #[prost(bool, tag = "3")]
    pub end_of_stream: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HttpBody {
    #[prost(bytes = "vec", tag = "1")]
    pub body: Vec<u8>,
    #[prost(bool, tag = "2")]
    pub end_of_stream: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HttpTrailers {
    #[prost(message, optional, tag = "1")]
    pub trailers: Option<HeaderMap>,
}

/// One answer to Envoy.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ProcessingResponse {
    #[prost(message, optional, tag = "8")]
    pub dynamic_metadata: Option<Struct>,
    #[prost(oneof = "processing_response::Response", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub response: Option<processing_response::Response>,
}

/// The kinds of [`ProcessingResponse`].
pub mod processing_response {
    /// Which message an answer is for, or an immediate response.
    #[derive(Clone, PartialEq, ::prost::Oneof)]
    pub enum Response {
        #[prost(message, tag = "1")]
        RequestHeaders(super::HeadersResponse),
        #[prost(message, tag = "2")]
        ResponseHeaders(super::HeadersResponse),
        #[prost(message, tag = "3")]
        RequestBody(super::BodyResponse),
        #[prost(message, tag = "4")]
        ResponseBody(super::BodyResponse),
        #[prost(message, tag = "5")]
        RequestTrailers(super::TrailersResponse),
        #[prost(message, tag = "6")]
        ResponseTrailers(super::TrailersResponse),
        #[prost(message, tag = "7")]
        ImmediateResponse(super::ImmediateResponse),
    }
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HeadersResponse {
    #[prost(message, optional, tag = "1")]
    pub response: Option<CommonResponse>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct BodyResponse {
    #[prost(message, optional, tag = "1")]
    pub response: Option<CommonResponse>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TrailersResponse {
    #[prost(message, optional, tag = "1")]
    pub header_mutation: Option<HeaderMutation>,
}

/// What an answer changes (its status left at CONTINUE).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CommonResponse {
    #[prost(message, optional, tag = "2")]
    pub header_mutation: Option<HeaderMutation>,
    #[prost(message, optional, tag = "3")]
    pub body_mutation: Option<BodyMutation>,
    #[prost(bool, tag = "5")]
    pub clear_route_cache: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HeaderMutation {
    #[prost(message, repeated, tag = "1")]
    pub set_headers: Vec<HeaderValueOption>,
    #[prost(string, repeated, tag = "2")]
    pub remove_headers: Vec<String>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct BodyMutation {
    #[prost(oneof = "body_mutation::Mutation", tags = "1, 2, 3")]
    pub mutation: Option<body_mutation::Mutation>,
}

/// The kinds of [`BodyMutation`].
pub mod body_mutation {
    /// A new whole body, the body cleared, or a piece of a streamed body.
    #[derive(Clone, PartialEq, ::prost::Oneof)]
    pub enum Mutation {
        #[prost(bytes, tag = "1")]
        Body(Vec<u8>),
        #[prost(bool, tag = "2")]
        ClearBody(bool),
        #[prost(message, tag = "3")]
        StreamedResponse(super::StreamedBodyResponse),
    }
}

/// A piece of a body in full-duplex streamed mode.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StreamedBodyResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub body: Vec<u8>,
    #[prost(bool, tag = "2")]
    pub end_of_stream: bool,
}

/// An answer to the client sent by Envoy at once; the request goes
/// nowhere.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ImmediateResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    #[prost(message, optional, tag = "2")]
    pub headers: Option<HeaderMutation>,
    #[prost(bytes = "vec", tag = "3")]
    pub body: Vec<u8>,
    #[prost(string, tag = "5")]
    pub details: String,
}
