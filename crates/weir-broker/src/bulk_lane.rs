//! The bulk lane: a few threads of their own, at a lower OS scheduling priority than the
//! rest of the broker, that run the appends of hot partitions (see `hot_partitions.rs`).
//! A producer flooding one partition then takes what CPU the others leave: the quiet
//! partitions' requests, handled on the runtime's threads at normal priority, are scheduled
//! first whenever both want a core. Its queue is bounded; a request finding it full waits.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

/// How much the lane's threads lower their priority (a nice value, as `nice(1)` adds).
/// At 10 the kernel gives a thread of normal priority about nine tenths of a contended core.
pub const BULK_NICE: i32 = 10;
/// Threads of the lane: one per core, at most this many.
const BULK_THREADS_MAX: usize = 4;
/// Appends waiting for a thread of the lane, per thread.
const BULK_QUEUE_PER_THREAD: usize = 2;

type Work = Box<dyn FnOnce() + Send>;

/// The bulk lane's queue; its threads end once it is dropped and the queue is drained.
pub struct BulkLane {
    queue: mpsc::Sender<Work>,
    threads: usize,
}

/// The lane's threads are gone (they only end when the lane is dropped).
#[derive(Debug, thiserror::Error)]
#[error("the bulk lane has stopped")]
pub struct LaneStopped;

impl BulkLane {
    /// A lane of one thread per core (at most [`BULK_THREADS_MAX`]) at [`BULK_NICE`], its
    /// threads inside `runtime` so that the work may spawn tasks.
    pub fn start(runtime: tokio::runtime::Handle) -> BulkLane {
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, BULK_THREADS_MAX);
        BulkLane::with_threads(runtime, threads, BULK_NICE)
    }

    /// A lane of `threads` threads at `nice`.
    pub fn with_threads(runtime: tokio::runtime::Handle, threads: usize, nice: i32) -> BulkLane {
        let (queue, receiver) = mpsc::channel::<Work>(threads * BULK_QUEUE_PER_THREAD);
        let receiver = Arc::new(Mutex::new(receiver));
        let mut started = 0;
        for index in 0..threads {
            let receiver = receiver.clone();
            let runtime = runtime.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("weir-bulk-{index}"))
                .spawn(move || {
                    lower_priority(nice);
                    let _runtime = runtime.enter();
                    while let Some(work) = next(&receiver) {
                        // A panic ends the work (its caller sees the lane drop its answer),
                        // not the thread.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(work));
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(error) => {
                    tracing::warn!(target: "weir::server", %error, "could not start a bulk lane thread")
                }
            }
        }
        BulkLane {
            queue,
            threads: started,
        }
    }

    /// Threads the lane runs on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `work` on one of the lane's threads, once the queue has room, and answers what it
    /// returned.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LaneStopped> {
        if self.threads == 0 {
            return Err(LaneStopped);
        }
        let (answer, answered) = oneshot::channel();
        let work: Work = Box::new(move || {
            let _ = answer.send(work());
        });
        self.queue.send(work).await.map_err(|_| LaneStopped)?;
        answered.await.map_err(|_| LaneStopped)
    }
}

/// The next work queued, or None once the lane is dropped and its queue drained.
fn next(receiver: &Mutex<mpsc::Receiver<Work>>) -> Option<Work> {
    receiver
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .blocking_recv()
}

/// Lowers the calling thread's scheduling priority by `nice` (Linux sets it per thread).
fn lower_priority(nice: i32) {
    let thread = rustix::thread::gettid();
    let lowered = rustix::process::getpriority_process(Some(thread))
        .and_then(|now| rustix::process::setpriority_process(Some(thread), now + nice));
    if let Err(error) = lowered {
        tracing::warn!(target: "weir::server", %error, "bulk lane thread runs at normal priority: could not lower it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn own_priority() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("getpriority")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_runs_on_a_lane_thread_of_lower_priority_inside_the_runtime() {
        let lane = BulkLane::with_threads(tokio::runtime::Handle::current(), 2, 5);
        let here = own_priority();
        let (name, priority, spawned) = lane
            .run(|| {
                let name = std::thread::current().name().map(str::to_string);
                // Work may spawn tasks: the thread is inside the runtime.
                let spawned = tokio::spawn(async { 7 });
                (name, own_priority(), spawned)
            })
            .await
            .expect("the lane runs it");
        assert_eq!(
            name.as_deref().map(|n| n.starts_with("weir-bulk-")),
            Some(true)
        );
        assert_eq!(priority, (here + 5).min(19), "nice raised by 5");
        assert_eq!(spawned.await.expect("task"), 7);
        assert_eq!(own_priority(), here, "the caller's thread is left alone");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_makes_the_next_caller_wait_and_a_panic_spares_the_thread() {
        let lane = Arc::new(BulkLane::with_threads(
            tokio::runtime::Handle::current(),
            1,
            0,
        ));
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let hold = Arc::new(Mutex::new(hold));
        // One running and BULK_QUEUE_PER_THREAD queued fill the lane of one thread.
        let mut busy = Vec::new();
        for _ in 0..=BULK_QUEUE_PER_THREAD {
            let (lane, hold) = (lane.clone(), hold.clone());
            busy.push(tokio::spawn(async move {
                lane.run(move || {
                    let _ = hold.lock().expect("lock").recv();
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let waiting = tokio::spawn({
            let lane = lane.clone();
            async move { lane.run(|| 1).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "the queue is full: the caller waits"
        );
        for _ in 0..=BULK_QUEUE_PER_THREAD {
            release.send(()).expect("release");
        }
        for task in busy {
            task.await.expect("task").expect("ran");
        }
        assert_eq!(waiting.await.expect("task").expect("ran"), 1);

        let panicked = lane.run(|| -> i32 { panic!("a failing append") }).await;
        assert!(panicked.is_err(), "the panic drops the answer");
        assert_eq!(lane.run(|| 2).await.expect("the thread lives on"), 2);
    }
}
