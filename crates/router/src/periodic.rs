//! [`every`]: a background duty run on a period until shutdown (the load
//! scrape, the LMCache poll).

use std::future::Future;
use std::time::Duration;

/// Runs `round` every `interval` (a late round delays the next rather than
/// bunching them) until `stop` says so, abandoning a round in progress.
pub async fn every<F, Fut>(
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            () = round() => {}
            _ = stop.changed() => return,
        }
    }
}
