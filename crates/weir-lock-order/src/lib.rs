//! `weir-lock-order` is the order in which one thread may take a node's locks, checked in
//! builds with debug assertions (the unit and integration tests): the group coordinator's
//! runtime, then a partition's replication state, its checkpoint lock and its log. A thread
//! holding a lock takes only locks of a later rank, so two threads can never each hold what the
//! other waits for. Taking a lock out of order panics at once, naming both locks, instead of
//! deadlocking one day under load. Release builds check nothing and pay nothing.
//!
//! The coordinator comes first because it appends its records to a partition of
//! `__consumer_offsets` (which takes that partition's locks) while it holds its own.

use std::ops::{Deref, DerefMut};

/// A node's locks, in the order a thread may take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// The group coordinator's shards (`weir_coordinator`'s runtime lock).
    Coordinator,
    /// The replicas, ISR and followers' progress (`Partition::replication`).
    Replication,
    /// Serializes checkpoint writes (`Partition::checkpoint_lock`).
    Checkpoint,
    /// The log (`Partition::log`, `Partition::log_mut`).
    Log,
}

#[cfg(debug_assertions)]
thread_local! {
    /// The ranks of the locks this thread holds, in the order it took them.
    static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A lock guard that records, while it lives, that its thread holds a lock of its rank.
pub struct Ranked<G> {
    // Dropped first: the lock is released before its rank is forgotten.
    guard: G,
    #[cfg(debug_assertions)]
    rank: Rank,
}

impl<G> Ranked<G> {
    /// Takes a lock of `rank` with `lock`, after checking that this thread holds no lock of the
    /// same or a later rank (debug builds).
    pub fn take(rank: Rank, lock: impl FnOnce() -> G) -> Ranked<G> {
        #[cfg(not(debug_assertions))]
        let _ = rank;
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(last) = held.iter().max() {
                assert!(
                    rank > *last,
                    "lock order violated: {rank:?} taken while this thread holds {last:?} (the order is Coordinator, Replication, Checkpoint, Log)"
                );
            }
            held.push(rank);
        });
        Ranked {
            guard: lock(),
            #[cfg(debug_assertions)]
            rank,
        }
    }
}

#[cfg(debug_assertions)]
impl<G> Drop for Ranked<G> {
    fn drop(&mut self) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|r| *r == self.rank) {
                held.remove(at);
            }
        });
    }
}

impl<G: Deref> Deref for Ranked<G> {
    type Target = G::Target;

    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Ranked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn locks_taken_in_order_and_released_in_any_order_pass() {
        let (replication, log) = (Mutex::new(1), Mutex::new(2));
        let coordinator = Mutex::new(0);
        let outer = Ranked::take(Rank::Coordinator, || coordinator.lock().expect("lock"));
        let first = Ranked::take(Rank::Replication, || replication.lock().expect("lock"));
        let second = Ranked::take(Rank::Log, || log.lock().expect("lock"));
        drop(first);
        drop(second);
        drop(outer);
        // Both released: the order starts again.
        let again = Ranked::take(Rank::Replication, || replication.lock().expect("lock"));
        assert_eq!(*again, 1);
    }

    #[test]
    #[should_panic(expected = "lock order violated: Replication taken while this thread holds Log")]
    fn a_lock_taken_after_a_later_one_panics() {
        let (replication, log) = (Mutex::new(1), Mutex::new(2));
        let _log = Ranked::take(Rank::Log, || log.lock().expect("lock"));
        let _replication = Ranked::take(Rank::Replication, || replication.lock().expect("lock"));
    }

    #[test]
    #[should_panic(
        expected = "lock order violated: Coordinator taken while this thread holds Replication"
    )]
    fn the_coordinator_taken_under_a_partition_lock_panics() {
        let (replication, coordinator) = (Mutex::new(1), Mutex::new(2));
        let _replication = Ranked::take(Rank::Replication, || replication.lock().expect("lock"));
        let _coordinator = Ranked::take(Rank::Coordinator, || coordinator.lock().expect("lock"));
    }

    #[test]
    #[should_panic(expected = "lock order violated: Log taken while this thread holds Log")]
    fn a_lock_of_the_same_rank_twice_panics() {
        let (one, two) = (Mutex::new(1), Mutex::new(2));
        let _one = Ranked::take(Rank::Log, || one.lock().expect("lock"));
        let _two = Ranked::take(Rank::Log, || two.lock().expect("lock"));
    }
}
