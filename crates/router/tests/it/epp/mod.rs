//! `prefix-router epp`: two endpoint pickers sharing a real valkey-server,
//! driven over real gRPC message by message as Envoy's ext_proc filter
//! does (no Envoy binary is obtainable here), with the real tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::envoy;
use crate::epp_fleet as fleet;
use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use envoy::{
    Envoy, common, destination, handed_back, immediate, modes, request_body, request_headers,
    response_body, response_headers, subset,
};
use fleet::{
    MODEL, completion, document, fleet, fleet_tuned, fleet_with, health, pick_duplex,
    wait_in_flight, wait_prefill, worker_of,
};
use prefix_router::BodyMode;
use prefix_router::ext_proc::processing_request::Request;
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::ext_proc::{BodySendMode, HttpTrailers, ProcessingRequest};
use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;

mod failures;
mod lifecycle;
mod picking;
