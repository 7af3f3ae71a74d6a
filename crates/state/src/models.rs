//! The models of a namespace: how many may exist ([`ModelLimits`]), and
//! forgetting one that has had no worker for a grace period, with its keys.
//!
//! Every router leases and collects every model of `<ns>:models` every
//! second, so a model that lingers costs every router and Valkey forever,
//! and junk registrations could add thousands. gc notes when a model has
//! no incarnation left (`empty_since` in its gc hash); past the grace it
//! deletes the model's keys in the same call, and the store then removes
//! the model from `<ns>:models` (another slot, so not in the script).

use std::time::Duration;

use protocol::check_name;

use super::{StateError, StateStore};

/// Limits on the models of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Most models at once; a worker of one more is refused.
    pub max_models: usize,
    /// How long a model without workers is kept before it is forgotten.
    pub grace: Duration,
}

impl Default for ModelLimits {
    fn default() -> Self {
        ModelLimits {
            max_models: 1024,
            grace: Duration::from_secs(600),
        }
    }
}

impl StateStore {
    /// Replaces the model limits (defaults until called).
    pub fn set_model_limits(&self, limits: ModelLimits) {
        *self
            .inner
            .model_limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = limits;
    }

    /// The model limits in force.
    pub fn model_limits(&self) -> ModelLimits {
        *self
            .inner
            .model_limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn known_models(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.inner
            .known_models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes models seen in `<ns>:models`.
    pub(crate) fn note_models<'a>(&self, models: impl IntoIterator<Item = &'a String>) {
        self.known_models().extend(models.into_iter().cloned());
    }

    /// Refuses a worker of a model that would be one more than the cap.
    pub(crate) async fn admit_model(&self, model: &str) -> Result<(), StateError> {
        if self.known_models().contains(model) {
            return Ok(());
        }
        let max = self.model_limits().max_models;
        let mut pipe = redis::pipe();
        pipe.sismember(self.keys().models(), model)
            .scard(self.keys().models());
        let (known, count): (bool, usize) = self
            .inner
            .conns
            .with_bulk(|mut c| async move {
                pipe.query_async(&mut c)
                    .await
                    .map_err(|e| StateError::from_redis("models", e))
            })
            .await?;
        if known || count < max {
            return Ok(());
        }
        Err(StateError::TooManyModels { max })
    }

    /// After gc deleted `model`'s keys: removes it from `<ns>:models` and
    /// its workers from `<ns>:worker_model`, unless a worker registered
    /// for it meanwhile.
    pub(crate) async fn forget_model(&self, model: &str) -> Result<(), StateError> {
        check_name("model", model)?;
        let parts = self.parts(model)?;
        let (models, ids) = (self.keys().models(), self.keys().worker_ids(&parts[0]));
        let worker_models = self.keys().worker_models();
        let name = model.to_owned();
        let forgotten = self
            .inner
            .conns
            .with_bulk(|mut c| async move {
                let err = |e| StateError::from_redis("forget model", e);
                let _: () = redis::cmd("SREM")
                    .arg(&models)
                    .arg(&name)
                    .query_async(&mut c)
                    .await
                    .map_err(err)?;
                // A registration between gc's deletion and the SREM above
                // recreated the ids hash: the model stays.
                let back: bool = redis::cmd("EXISTS")
                    .arg(&ids)
                    .query_async(&mut c)
                    .await
                    .map_err(err)?;
                if back {
                    let _: () = redis::cmd("SADD")
                        .arg(&models)
                        .arg(&name)
                        .query_async(&mut c)
                        .await
                        .map_err(err)?;
                    return Ok(false);
                }
                let mut cursor = 0u64;
                loop {
                    let (next, pairs): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                        .arg(&worker_models)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut c)
                        .await
                        .map_err(err)?;
                    let gone: Vec<&String> = pairs
                        .iter()
                        .filter(|(_, m)| *m == name)
                        .map(|(w, _)| w)
                        .collect();
                    if !gone.is_empty() {
                        let _: () = redis::cmd("HDEL")
                            .arg(&worker_models)
                            .arg(&gone)
                            .query_async(&mut c)
                            .await
                            .map_err(err)?;
                    }
                    if next == 0 {
                        return Ok(true);
                    }
                    cursor = next;
                }
            })
            .await?;
        if forgotten {
            self.known_models().remove(model);
            tracing::info!(model, "model without workers forgotten with its keys");
        }
        Ok(())
    }
}
