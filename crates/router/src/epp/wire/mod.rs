//! Envoy's ext_proc protocol on the wire: the messages the picker reads
//! and writes, and the `envoy.service.ext_proc.v3.ExternalProcessor`
//! gRPC service, written by hand for only what the picker uses.
//!
//! Each message keeps the field numbers and types of Envoy's `.proto`
//! files (`envoy/service/ext_proc/v3/external_processor.proto`,
//! `envoy/config/core/v3/base.proto`, `envoy/type/v3/http_status.proto`,
//! `envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto`,
//! `google/protobuf/struct.proto`) and leaves out the fields the picker
//! never reads or sets: protobuf skips unknown fields when decoding, so a
//! gateway's message with more fields decodes to the same values, and an
//! answer without them means what it means with them at their defaults.
//!
//! * `core`: Envoy's headers, metadata and HTTP status, and
//!   `google.protobuf.Struct`.
//! * `messages`: `ProcessingRequest`, `ProcessingResponse` and their parts.
//! * `service`: the `Process` method (bidirectional streaming) as a tonic
//!   service, and its path for clients.

mod core;
mod messages;
mod service;

pub use core::{
    BodySendMode, HeaderMap, HeaderValue, HeaderValueOption, HttpStatus, ListValue, Metadata,
    Struct, Value, value,
};
pub use messages::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpBody,
    HttpHeaders, HttpTrailers, ImmediateResponse, ProcessingRequest, ProcessingResponse,
    ProtocolConfiguration, StreamedBodyResponse, TrailersResponse, body_mutation,
    processing_request, processing_response,
};
pub use service::{ExternalProcessorServer, PROCESS_PATH, Processor, ResponseStream};
