//! [`flow_admit`]: flow control's gate on the request pipeline, asked once
//! right after admission by both modes (`serve`'s pipeline, the endpoint
//! picker's pick).

use std::sync::Arc;

use tracing::Instrument;

use crate::admission::RequestClass;
use crate::flow::{FlowControl, Ticket};
use crate::proxy::ProxyError;
use crate::telemetry::SPANS;

/// Flow control's leave to route a request of `model` now (after its wait,
/// if the workers are saturated), or its refusal; no ticket when flow
/// control is off. The one place both modes ask, right after admission.
pub async fn flow_admit(
    flow: Option<&Arc<FlowControl>>,
    model: &str,
    class: &RequestClass,
) -> Result<Option<Ticket>, ProxyError> {
    let Some(flow) = flow else {
        return Ok(None);
    };
    let ticket = flow
        .admit(model, class)
        .instrument(tracing::info_span!(target: SPANS, "flow_wait"))
        .await?;
    Ok(Some(ticket))
}
