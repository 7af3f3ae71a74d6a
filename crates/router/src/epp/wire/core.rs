//! The shared Envoy and protobuf types the ext_proc messages carry:
//! headers, metadata, an HTTP status, the body send mode, and
//! `google.protobuf.Struct` (dynamic metadata's values).

use std::collections::HashMap;

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    /// Older Envoys send the value here; newer ones in `raw_value`.
    #[prost(string, tag = "2")]
    pub value: String,
    #[prost(bytes = "vec", tag = "3")]
    pub raw_value: Vec<u8>,
}

/// `envoy.config.core.v3.HeaderValueOption` (its append settings left at
/// their defaults: a header set replaces the request's).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
}

/// `envoy.config.core.v3.HeaderMap`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HeaderMap {
    #[prost(message, repeated, tag = "1")]
    pub headers: Vec<HeaderValue>,
}

/// `envoy.config.core.v3.Metadata` (untyped filter metadata only).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Metadata {
    #[prost(map = "string, message", tag = "1")]
    pub filter_metadata: HashMap<String, Struct>,
}

/// `envoy.type.v3.HttpStatus` (the code is Envoy's `StatusCode` enum,
/// whose values are the HTTP codes).
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct HttpStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
}

/// `envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode`
/// (a value this list lacks decodes as an error, as an unknown mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ::prost::Enumeration)]
#[repr(i32)]
pub enum BodySendMode {
    None = 0,
    Streamed = 1,
    Buffered = 2,
    BufferedPartial = 3,
    FullDuplexStreamed = 4,
}

/// `google.protobuf.Struct`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Struct {
    #[prost(map = "string, message", tag = "1")]
    pub fields: HashMap<String, Value>,
}

/// `google.protobuf.Value`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Value {
    #[prost(oneof = "value::Kind", tags = "1, 2, 3, 4, 5, 6")]
    pub kind: Option<value::Kind>,
}

/// `google.protobuf.ListValue`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<Value>,
}

/// The kinds of a [`Value`].
pub mod value {
    /// `google.protobuf.Value.kind`.
    #[derive(Clone, PartialEq, ::prost::Oneof)]
    pub enum Kind {
        /// `google.protobuf.NullValue` (its one value, 0).
        #[prost(int32, tag = "1")]
        NullValue(i32),
        #[prost(double, tag = "2")]
        NumberValue(f64),
        #[prost(string, tag = "3")]
        StringValue(String),
        #[prost(bool, tag = "4")]
        BoolValue(bool),
        #[prost(message, tag = "5")]
        StructValue(super::Struct),
        #[prost(message, tag = "6")]
        ListValue(super::ListValue),
    }
}
