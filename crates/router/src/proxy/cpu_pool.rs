//! [`CpuPool`]: where prompts are tokenized and hashed, off the async
//! workers, in two lanes: small bodies in one, large ones in another with
//! at most `threads` at once and at most `queue` more waiting.
//!
//! Tokenizing a long prompt takes seconds of CPU; on a request task it
//! would stall every other request of that worker thread (health checks,
//! small completions, Valkey calls past their deadline). Here a job runs on
//! tokio's blocking threads behind a semaphore, and a job that finds its
//! lane and queue full is refused at once ([`PoolBusy`], a 503) rather than
//! waiting without bound. Small prompts have a lane of their own, so they
//! never queue behind large ones, and the large lane leaves cores to them.
//! Jobs up to [`CpuPool::inline_up_to`]'s size (none by default) run on
//! the caller's thread: for the smallest, the hop to a blocking thread and
//! back (two thread wake-ups) costs more than they do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

/// The pool and its queue are full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the router is busy tokenizing other prompts; retry shortly")]
pub struct PoolBusy;

/// Bodies up to this size go to the small lane (milliseconds of work).
pub const SMALL_JOB_BYTES: usize = 64 << 10;

/// Two bounded lanes of blocking threads for CPU-heavy work.
#[derive(Debug)]
pub struct CpuPool {
    small: Lane,
    large: Lane,
    /// Jobs up to this size run on the caller's thread.
    inline: usize,
}

/// Jobs of one size class: at most `threads` running, `capacity` admitted.
#[derive(Debug)]
struct Lane {
    /// `small` or `large`: the `lane` label of its metrics.
    name: &'static str,
    running: Arc<Semaphore>,
    admitted: Arc<AtomicUsize>,
    capacity: usize,
}

/// Counts a job as admitted until dropped (done, refused or abandoned).
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts a job in `prefix_router_cpu_pool_running{lane}` while it runs
/// (to its end, panics included).
struct Running(&'static str);

impl Running {
    fn start(lane: &'static str) -> Self {
        metrics::gauge!("prefix_router_cpu_pool_running", "lane" => lane).increment(1.0);
        Running(lane)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        metrics::gauge!("prefix_router_cpu_pool_running", "lane" => self.0).decrement(1.0);
    }
}

impl CpuPool {
    /// At most `threads` large jobs run at once (at least 1) and `queue`
    /// more wait; small jobs have a lane of four per core (and the same
    /// queue) beside them.
    pub fn new(threads: usize, queue: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        CpuPool {
            small: Lane::new("small", 4 * cores, queue.max(1) * 4),
            large: Lane::new("large", threads, queue),
            inline: 0,
        }
    }

    /// Runs jobs of at most `bytes` on the caller's thread (0: none).
    pub fn inline_up_to(mut self, bytes: usize) -> Self {
        self.inline = bytes;
        self
    }

    /// Runs `job`, whose input is `bytes` long, on a blocking thread of its
    /// lane; [`PoolBusy`] at once when the lane and its queue are full. A
    /// caller that goes away while waiting gives its place up; a job that
    /// has started runs to its end (it holds its slot until then).
    pub async fn run<T, F>(&self, bytes: usize, job: F) -> Result<T, PoolBusy>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if bytes <= self.inline {
            return Ok(job());
        }
        let lane = if bytes <= SMALL_JOB_BYTES {
            &self.small
        } else {
            &self.large
        };
        // An oversized prompt's tokenizing leaves hundreds of MB free in
        // the allocator: handed back once the job is done.
        let give_back = bytes >= crate::memory::GIVE_BACK_BYTES;
        lane.run(job, give_back).await
    }
}

impl Lane {
    fn new(name: &'static str, threads: usize, queue: usize) -> Self {
        let threads = threads.max(1);
        Lane {
            name,
            running: Arc::new(Semaphore::new(threads)),
            admitted: Arc::default(),
            capacity: threads + queue,
        }
    }

    async fn run<T, F>(&self, job: F, give_back: bool) -> Result<T, PoolBusy>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("prefix_router_cpu_pool_refused_total").increment(1);
            return Err(PoolBusy);
        }
        let _admitted = Admitted(self.admitted.clone());
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| PoolBusy)?;
        let lane = self.name;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _running = Running::start(lane);
            let out = job();
            if give_back {
                crate::memory::give_back();
            }
            out
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a tokenizing job panicked");
            PoolBusy
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_threads_and_queue_a_job_is_refused_at_once() {
        let pool = Arc::new(CpuPool::new(1, 1));
        let big = SMALL_JOB_BYTES + 1;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let block = |rx: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>| {
            move || {
                let _ = rx.lock().unwrap().recv();
                1
            }
        };
        let a = tokio::spawn({
            let (pool, rx) = (pool.clone(), rx.clone());
            async move { pool.run(big, block(rx)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let b = tokio::spawn({
            let (pool, rx) = (pool.clone(), rx.clone());
            async move { pool.run(big, block(rx)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // One running, one queued: a third is refused without waiting,
        // while a small job still runs at once.
        assert_eq!(pool.run(big, || 3).await, Err(PoolBusy));
        assert_eq!(pool.run(10, || 5).await, Ok(5));
        tx.send(()).unwrap();
        tx.send(()).unwrap();
        assert_eq!(a.await.unwrap(), Ok(1));
        assert_eq!(b.await.unwrap(), Ok(1));
        assert_eq!(pool.run(big, || 4).await, Ok(4));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn jobs_up_to_the_inline_size_run_on_the_callers_thread() {
        let pool = CpuPool::new(1, 1).inline_up_to(100);
        let here = std::thread::current().id();
        let id = || std::thread::current().id();
        assert_eq!(pool.run(100, id).await, Ok(here));
        assert_ne!(pool.run(101, id).await, Ok(here));
        let none = CpuPool::new(1, 1);
        assert_ne!(none.run(1, id).await, Ok(here));
    }
}
