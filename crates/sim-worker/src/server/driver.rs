//! The driver task: moves the engine's clock along, as the engine's module
//! docs prescribe. It steps the engine (admissions handed to waiting
//! handlers, cache events published, finished requests released), then
//! sleeps until the engine's next event or until a handler wakes it after a
//! submit, abort or reset.

use std::sync::Arc;

use tokio::sync::watch;

use super::core::SimCore;

/// Runs until `stop` changes (or its sender is dropped).
pub async fn drive(core: Arc<SimCore>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = core.now();
        let next = core.lock().step(now);
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(core.instant(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = due => {}
            _ = core.woken() => {}
            _ = stop.changed() => return,
        }
    }
}
