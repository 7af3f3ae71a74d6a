//! [`Proxy::flow_admit`]: flow control's gate on the routing path, asked
//! once right after admission by both modes (`route_and_forward`, `pick`).

use std::sync::Arc;

use tracing::Instrument;

use super::{Proxy, ProxyError};
use crate::admission::RequestClass;
use crate::flow::{FlowControl, Ticket};
use crate::telemetry::SPANS;

impl Proxy {
    /// Holds requests in the waiting room while the workers are saturated
    /// (off unless given).
    pub fn with_flow_control(mut self, flow: Option<Arc<FlowControl>>) -> Self {
        self.flow = flow;
        self
    }

    /// Flow control's leave to route a request of `model` now (after its
    /// wait, if the workers are saturated), or its refusal. The one place
    /// both modes ask, right after admission.
    pub(super) async fn flow_admit(
        &self,
        model: &str,
        class: &RequestClass,
    ) -> Result<Option<Ticket>, ProxyError> {
        let Some(flow) = &self.flow else {
            return Ok(None);
        };
        let ticket = flow
            .admit(model, class)
            .instrument(tracing::info_span!(target: SPANS, "flow_wait"))
            .await?;
        Ok(Some(ticket))
    }
}
