//! vLLM's KV events over ZeroMQ, the transport around `protocol::kv_events`:
//! an engine's PUB socket and replay ROUTER ([`KvEventPublisher`], for
//! simulated engines), the reporter's SUB socket ([`KvEventSubscriber`]) and
//! DEALER replay client ([`replay_from`]). All input is untrusted: malformed
//! frames give errors, never panics; what a newer engine adds, or a broken
//! one garbles, is counted and logged once per kind ([`Drift`]).

mod drift;
mod endpoint;
mod publisher;
mod replay;
mod subscriber;

pub use drift::Drift;
pub use endpoint::{SocketMode, bindable_endpoint};
pub use publisher::{KvEventPublisher, KvEventPublisherConfig, PublishError, PublisherError};
pub use replay::{ReplayError, ReplayOptions, ReplayedBatch, replay_from};
pub use subscriber::{KvEventSubscriber, KvEventSubscriberConfig, ReceivedBatch, SubscriberError};
