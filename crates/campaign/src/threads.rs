//! Threads kept between a mesh's jobs. A coordinator starts thousands of jobs an hour for
//! months; rather than a thread started for each and ended after it (a soak saw the
//! coordinator's RSS follow its count of threads, sample to sample), a thread that ends a
//! job waits for the next one, and goes only after [`ThreadPool::KEEP`] without one: a
//! steady mesh keeps as many as it runs jobs at once, and its thread count stays flat.
//!
//! Not rayon's or a crate's pool: a job blocks for its whole run (a stream of seconds on
//! an agent), so the pool must grow to as many jobs as run at once rather than queue them
//! behind a fixed number of threads; this is the few lines that do that.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

type Task = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    tasks: VecDeque<Task>,
    /// Threads waiting for a task and not yet promised one: a task given while this is
    /// above zero wakes one of them; otherwise it starts a thread.
    idle: usize,
    /// Threads alive (running a task or waiting for one).
    threads: usize,
    closing: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// Runs each task given at once, on a waiting thread or a new one.
pub struct ThreadPool {
    name: String,
    shared: Arc<Shared>,
    keep: Duration,
}

impl ThreadPool {
    /// How long a thread waits for its next task before it ends.
    pub const KEEP: Duration = Duration::from_secs(30);

    /// A pool whose threads are named `name`.
    pub fn new(name: &str) -> ThreadPool {
        ThreadPool::keeping(name, ThreadPool::KEEP)
    }

    /// A pool whose threads wait `keep` for their next task.
    pub fn keeping(name: &str, keep: Duration) -> ThreadPool {
        ThreadPool {
            name: name.to_string(),
            shared: Arc::default(),
            keep,
        }
    }

    /// Runs `task` now: on a thread that is waiting, or on a new one when none is.
    pub fn run(&self, task: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.idle > 0 {
            state.idle -= 1;
            state.tasks.push_back(Box::new(task));
            self.shared.wake.notify_one();
            return Ok(());
        }
        state.tasks.push_back(Box::new(task));
        let shared = self.shared.clone();
        let keep = self.keep;
        match std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || serve(&shared, keep))
        {
            Ok(_) => {
                state.threads += 1;
                Ok(())
            }
            Err(error) => {
                state.tasks.pop_back();
                Err(error)
            }
        }
    }

    /// Threads alive now, and of them those waiting for a task.
    pub fn threads(&self) -> (usize, usize) {
        let state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (state.threads, state.idle)
    }
}

impl Drop for ThreadPool {
    /// The waiting threads end now; a running task ends its thread when it returns.
    fn drop(&mut self) {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.closing = true;
        self.shared.wake.notify_all();
    }
}

/// A pool thread: runs tasks as they come, ends after `keep` without one or once the
/// pool is gone.
fn serve(shared: &Shared, keep: Duration) {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(task) = state.tasks.pop_front() {
            drop(state);
            task();
            state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.closing {
                break;
            }
            state.idle += 1;
            continue;
        }
        if state.closing {
            // Promised no task (the pool is gone): it was counted waiting.
            state.idle = state.idle.saturating_sub(1);
            break;
        }
        let (next, waited) = shared
            .wake
            .wait_timeout(state, keep)
            .unwrap_or_else(PoisonError::into_inner);
        state = next;
        // Ends only if no task waits and it is not promised one: some waiting thread is
        // unpromised exactly when `idle` is above zero, and any of them may be the one
        // to go.
        if waited.timed_out() && state.tasks.is_empty() && state.idle > 0 {
            state.idle -= 1;
            break;
        }
    }
    state.threads -= 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// Tasks that block run at once side by side (the pool grows to them, none queues
    /// behind another); the threads then serve the next tasks rather than new ones
    /// starting; after their keep without a task, they end.
    #[test]
    fn the_pool_grows_to_what_runs_at_once_reuses_its_threads_and_lets_them_go() {
        let pool = ThreadPool::keeping("test-pool", Duration::from_secs(2));
        let ids = Arc::new(Mutex::new(std::collections::HashSet::new()));
        for round in 0..5 {
            let (started, all_started) = mpsc::channel();
            let release = Arc::new((Mutex::new(false), Condvar::new()));
            for _ in 0..4 {
                let (started, release, ids) = (started.clone(), release.clone(), ids.clone());
                pool.run(move || {
                    ids.lock().unwrap().insert(std::thread::current().id());
                    started.send(()).unwrap();
                    let (lock, cv) = &*release;
                    let mut go = lock.lock().unwrap();
                    while !*go {
                        go = cv.wait(go).unwrap();
                    }
                })
                .unwrap();
            }
            // All four run at once: none waits for another to end.
            for _ in 0..4 {
                all_started
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| panic!("round {round}: a task queued"));
            }
            *release.0.lock().unwrap() = true;
            release.1.notify_all();
            wait_for(|| pool.threads() == (4, 4));
        }
        assert_eq!(
            ids.lock().unwrap().len(),
            4,
            "the same four threads each round"
        );
        wait_for(|| pool.threads() == (0, 0));
    }

    /// Many tasks given from several threads at once each run exactly once.
    #[test]
    fn every_task_runs_once() {
        let pool = Arc::new(ThreadPool::keeping("test-pool", Duration::from_millis(50)));
        let ran = Arc::new(AtomicUsize::new(0));
        let givers: Vec<_> = (0..4)
            .map(|_| {
                let (pool, ran) = (pool.clone(), ran.clone());
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let ran = ran.clone();
                        pool.run(move || {
                            ran.fetch_add(1, Ordering::SeqCst);
                        })
                        .unwrap();
                        if i % 100 == 0 {
                            std::thread::sleep(Duration::from_millis(60));
                        }
                    }
                })
            })
            .collect();
        for giver in givers {
            giver.join().unwrap();
        }
        wait_for(|| ran.load(Ordering::SeqCst) == 2000);
        wait_for(|| pool.threads().0 == 0);
    }

    /// Polls `done` for up to 20 s (a busy machine's threads may be slow to get there).
    fn wait_for(done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "not reached in 20 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
