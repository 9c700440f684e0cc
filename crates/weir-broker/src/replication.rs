//! What a partition's leader knows of its followers: how far each has fetched, when each was
//! last caught up, and the ISR change it has asked the controller for. From that it computes
//! the high watermark (the smallest log end over the ISR, counting a replica being added) and
//! decides when a follower joins or leaves the ISR. Memory only; the partition holds it under
//! its own lock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weir_log::Log;
use weir_metadata::{ControllerError, MetadataImage, PartitionImage};

/// How far one follower has got, as its fetches tell the leader.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// The offset it asked for last: everything below is in its log. `None` until it fetches.
    log_end: Option<i64>,
    /// Its log start offset as its last fetch said (`None` until it fetches, or when it
    /// did not say).
    log_start: Option<i64>,
    /// When its log end last reached the leader's.
    caught_up_at: Instant,
    /// The leader's log end and the time of its previous fetch.
    previous_fetch: Option<(i64, Instant)>,
}

/// A fetch that names a broker holding no replica of the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAReplica;

/// An ISR the leader wants, against the partition state it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrRequest {
    /// The ISR wanted.
    pub isr: Vec<i32>,
    /// The leader epoch it leads at.
    pub leader_epoch: i32,
    /// The partition epoch of the state it changes.
    pub partition_epoch: i32,
}

/// The replication state of one partition on this broker.
#[derive(Debug, Clone)]
pub struct Replication {
    /// The partition as the last applied image has it.
    pub image: PartitionImage,
    followers: HashMap<i32, Progress>,
    /// An ISR change asked of the controller and not yet in the image.
    pending: Option<IsrRequest>,
}

impl Replication {
    /// The state of a partition not led here yet.
    pub fn new(image: PartitionImage) -> Replication {
        Replication {
            image,
            followers: HashMap::new(),
            pending: None,
        }
    }

    /// Applies a newer image of the partition. A new leadership here starts every follower's
    /// progress afresh (each ISR member counts as caught up now); a pending change is settled
    /// once the partition epoch moves.
    pub fn update(&mut self, image: &PartitionImage, node_id: i32, now: Instant) {
        let newly_leading = image.leader == node_id
            && (self.image.leader != node_id || self.image.leader_epoch != image.leader_epoch);
        let fresh = Progress {
            log_end: None,
            log_start: None,
            caught_up_at: now,
            previous_fetch: None,
        };
        if newly_leading {
            self.followers.clear();
        }
        if image.leader == node_id {
            // A reassignment adds and removes followers under the same leadership.
            self.followers.retain(|id, _| image.replicas.contains(id));
            for id in image.replicas.iter().filter(|id| **id != node_id) {
                self.followers.entry(*id).or_insert(fresh);
            }
        } else {
            self.followers.clear();
        }
        if image.partition_epoch != self.image.partition_epoch {
            self.pending = None;
        }
        self.image = image.clone();
    }

    /// The ISR the high watermark must wait for: the image's, plus a replica being added
    /// (should the addition commit, it must already hold everything below the watermark).
    fn maximal_isr(&self) -> impl Iterator<Item = i32> + '_ {
        let pending = self.pending.iter().flat_map(|p| p.isr.iter().copied());
        self.image
            .isr
            .iter()
            .copied()
            .chain(pending.filter(|id| !self.image.isr.contains(id)))
    }

    /// The high watermark the ISR allows: the smallest log end over the maximal ISR, the
    /// leader's being `leader_log_end`. `None` while some member's position is unknown.
    pub fn high_watermark(&self, node_id: i32, leader_log_end: i64) -> Option<i64> {
        self.maximal_isr().try_fold(leader_log_end, |low, id| {
            if id == node_id {
                return Some(low);
            }
            let end = self.followers.get(&id)?.log_end?;
            Some(low.min(end))
        })
    }

    /// Each follower's log end as last fetched (`None` before its first fetch), by node id.
    pub fn follower_log_ends(&self) -> Vec<(i32, Option<i64>)> {
        let mut ends: Vec<(i32, Option<i64>)> = self
            .followers
            .iter()
            .map(|(id, progress)| (*id, progress.log_end))
            .collect();
        ends.sort_unstable();
        ends
    }

    /// The low watermark (DeleteRecords): the smallest log start offset over the leader's
    /// (`leader_log_start`) and the in-sync followers' as their fetches last said (one that
    /// has not said is left out, as Kafka leaves out replicas whose start it does not know).
    pub fn low_watermark(&self, node_id: i32, leader_log_start: i64) -> i64 {
        self.image
            .isr
            .iter()
            .filter(|id| **id != node_id)
            .filter_map(|id| self.followers.get(id)?.log_start)
            .fold(leader_log_start, i64::min)
    }

    /// Records a fetch by follower `replica` at `fetch_offset` (its log starting at
    /// `log_start`, -1 when the fetch does not say) while the leader's log ends at
    /// `leader_log_end`. Caught up means at the leader's end now, or at least at the end the
    /// leader had at its previous fetch (it fetches continuously and keeps pace), as in Kafka.
    /// `false` when `replica` is not a replica of the partition.
    pub fn record_fetch(
        &mut self,
        replica: i32,
        fetch_offset: i64,
        log_start: i64,
        leader_log_end: i64,
        now: Instant,
    ) -> bool {
        let Some(progress) = self.followers.get_mut(&replica) else {
            return false;
        };
        if fetch_offset >= leader_log_end {
            progress.caught_up_at = now;
        } else if let Some((end, at)) = progress.previous_fetch {
            if fetch_offset >= end {
                progress.caught_up_at = progress.caught_up_at.max(at);
            }
        }
        progress.log_end = Some(fetch_offset);
        progress.log_start = (log_start >= 0).then_some(log_start);
        progress.previous_fetch = Some((leader_log_end, now));
        true
    }

    /// The ISR with `replica` added, when it has caught up to `high_watermark` and to the
    /// start of the leader's epoch (`epoch_start`) and no other change is pending.
    pub fn expansion(
        &mut self,
        replica: i32,
        high_watermark: i64,
        epoch_start: i64,
    ) -> Option<IsrRequest> {
        if self.pending.is_some() || self.image.isr.contains(&replica) {
            return None;
        }
        let end = self.followers.get(&replica)?.log_end?;
        if end < high_watermark || end < epoch_start {
            return None;
        }
        let mut isr = self.image.isr.clone();
        isr.push(replica);
        self.ask(isr)
    }

    /// The ISR without the followers that have not been caught up for `lag_max`, if any.
    pub fn shrink(&mut self, node_id: i32, lag_max: Duration, now: Instant) -> Option<IsrRequest> {
        if self.pending.is_some() || self.image.leader != node_id {
            return None;
        }
        let lagging = |id: &i32| {
            self.followers
                .get(id)
                .is_some_and(|p| now.saturating_duration_since(p.caught_up_at) > lag_max)
        };
        let isr: Vec<i32> = self
            .image
            .isr
            .iter()
            .copied()
            .filter(|id| !lagging(id))
            .collect();
        if isr.len() == self.image.isr.len() {
            return None;
        }
        self.ask(isr)
    }

    fn ask(&mut self, isr: Vec<i32>) -> Option<IsrRequest> {
        let request = IsrRequest {
            isr,
            leader_epoch: self.image.leader_epoch,
            partition_epoch: self.image.partition_epoch,
        };
        self.pending = Some(request.clone());
        Some(request)
    }

    /// The controller refused `request` outright: it is no longer pending, so the next fetch
    /// or check may ask again.
    pub fn settle(&mut self, request: &IsrRequest) {
        if self.pending.as_ref() == Some(request) {
            self.pending = None;
        }
    }

    /// Whether `request` is still the change waited for (no image has settled it).
    pub fn is_pending(&self, request: &IsrRequest) -> bool {
        self.pending.as_ref() == Some(request)
    }
}

/// Whether an ISR change the controller answered with `error` certainly was not made, so the
/// partition may settle it and ask again. Otherwise (the active controller could not be
/// reached or moved, the partition moved on, the image here has not caught up) it may have
/// been committed: it stays pending, and with it the high watermark's wait for a replica being
/// added, until an image settles it, since a replica that joined the ISR unknown to the leader
/// might otherwise be elected without what the leader acknowledged meanwhile.
pub fn refusal_is_final(error: &ControllerError) -> bool {
    !matches!(
        error,
        ControllerError::NotController(_)
            | ControllerError::InvalidUpdateVersion(_)
            | ControllerError::NotAppliedInTime(_)
            | ControllerError::Fatal(_)
    )
}

/// Why a fetch that names a replica was not taken as that broker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaRefusal {
    /// A Fetch before v15 carries no broker epoch, so nothing proves who sent it.
    NoEpoch,
    /// No broker of that id is registered (or not in the image applied here yet).
    NotRegistered,
    /// The epoch is not the one of the broker's current registration; `newer` when it is
    /// above it (a registration the image here may not hold yet).
    WrongEpoch {
        /// Above the registered epoch.
        newer: bool,
    },
}

impl std::fmt::Display for ReplicaRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaRefusal::NoEpoch => {
                "a replica fetch before Fetch v15 carries no broker epoch (KIP-903)"
            }
            ReplicaRefusal::NotRegistered => {
                "no broker of that id is registered (or its registration is not applied here yet)"
            }
            ReplicaRefusal::WrongEpoch { newer: false } => {
                "the replica epoch is not the broker epoch of its current registration"
            }
            ReplicaRefusal::WrongEpoch { newer: true } => {
                "the replica epoch is not the broker epoch of its registration here (a newer registration may not be applied here yet)"
            }
        })
    }
}

/// Checks that a fetch naming replica `replica_id` comes from that broker before its position
/// is believed (a follower's fetch moves the high watermark and the ISR, so a client posing as
/// one could have writes acknowledged that no follower holds): it must carry (Fetch v15+,
/// KIP-903) the broker epoch of the broker's current registration in `image`. `replica_epoch`
/// is `None` for an older Fetch. Broker epochs carry 31 random bits, so guessing one takes
/// billions of tries, each costing the guesser its connection.
pub fn check_replica(
    image: &MetadataImage,
    replica_id: i32,
    replica_epoch: Option<i64>,
) -> Result<(), ReplicaRefusal> {
    let epoch = replica_epoch.ok_or(ReplicaRefusal::NoEpoch)?;
    let broker = image
        .broker(replica_id)
        .ok_or(ReplicaRefusal::NotRegistered)?;
    match u64::try_from(epoch) {
        Ok(epoch) if epoch == broker.epoch => Ok(()),
        Ok(epoch) => Err(ReplicaRefusal::WrongEpoch {
            newer: epoch > broker.epoch,
        }),
        Err(_) => Err(ReplicaRefusal::WrongEpoch { newer: false }),
    }
}

/// Where a follower whose last batch has epoch `last_epoch` and whose log ends at
/// `fetch_offset` diverges from this leader's log (KIP-320): the largest epoch up to
/// `last_epoch` the leader knows and where it ends here, when that is not `last_epoch` or ends
/// before `fetch_offset`. `None` when the logs agree (or the follower sent no epoch).
pub fn divergence(log: &Log, last_epoch: i32, fetch_offset: i64) -> Option<(i32, i64)> {
    if last_epoch < 0 {
        return None;
    }
    match log.end_offset_for_epoch(last_epoch) {
        Some((epoch, end)) => (epoch != last_epoch || end < fetch_offset).then_some((epoch, end)),
        None => Some((0, log.log_start_offset())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn led(replicas: Vec<i32>, isr: Vec<i32>) -> (Replication, Instant) {
        let now = Instant::now();
        let image = PartitionImage {
            replicas,
            isr,
            leader: 1,
            leader_epoch: 3,
            partition_epoch: 5,
            adding: Vec::new(),
            removing: Vec::new(),
        };
        let mut state = Replication::new(PartitionImage::new(Vec::new(), |_| true));
        state.update(&image, 1, now);
        (state, now)
    }

    #[test]
    fn the_high_watermark_waits_for_every_in_sync_follower() {
        let (mut state, now) = led(vec![1, 2, 3], vec![1, 2, 3]);
        assert_eq!(state.high_watermark(1, 10), None, "positions unknown");
        state.record_fetch(2, 7, -1, 10, now);
        assert_eq!(state.high_watermark(1, 10), None);
        state.record_fetch(3, 9, -1, 10, now);
        assert_eq!(state.high_watermark(1, 10), Some(7));
        assert!(!state.record_fetch(4, 10, -1, 10, now), "not a replica");
    }

    #[test]
    fn the_low_watermark_is_the_smallest_start_the_in_sync_replicas_said() {
        let (mut state, now) = led(vec![1, 2, 3], vec![1, 2]);
        assert_eq!(state.low_watermark(1, 40), 40, "no follower said yet");
        state.record_fetch(2, 50, 30, 50, now);
        state.record_fetch(3, 50, 10, 50, now);
        assert_eq!(state.low_watermark(1, 40), 30, "3 is not in sync");
        state.record_fetch(2, 50, 45, 50, now);
        assert_eq!(state.low_watermark(1, 40), 40);
        state.record_fetch(2, 50, -1, 50, now);
        assert_eq!(state.low_watermark(1, 40), 40, "a fetch that does not say");
    }

    #[test]
    fn a_follower_is_added_once_caught_up_and_counts_while_pending() {
        let (mut state, now) = led(vec![1, 2, 3], vec![1, 2]);
        state.record_fetch(2, 10, -1, 10, now);
        state.record_fetch(3, 4, -1, 10, now);
        assert_eq!(state.high_watermark(1, 10), Some(10));
        assert_eq!(state.expansion(3, 10, 0), None, "behind the high watermark");
        state.record_fetch(3, 10, -1, 12, now);
        let request = state.expansion(3, 10, 0).expect("expands");
        assert_eq!(
            (request.isr.clone(), request.partition_epoch),
            (vec![1, 2, 3], 5)
        );
        assert_eq!(state.expansion(3, 10, 0), None, "one change at a time");
        // While pending, the high watermark waits for the follower being added.
        state.record_fetch(2, 12, -1, 12, now);
        assert_eq!(state.high_watermark(1, 12), Some(10));
        state.settle(&request);
        assert_eq!(state.high_watermark(1, 12), Some(12));
    }

    #[test]
    fn a_follower_behind_for_longer_than_the_lag_leaves_the_isr() {
        let (mut state, now) = led(vec![1, 2, 3], vec![1, 2, 3]);
        let lag = Duration::from_secs(10);
        state.record_fetch(2, 10, -1, 10, now);
        state.record_fetch(3, 5, -1, 10, now);
        assert_eq!(state.shrink(1, lag, now + Duration::from_secs(5)), None);
        // Follower 2 keeps pace: at the end the leader had at its previous fetch.
        state.record_fetch(2, 10, -1, 20, now + Duration::from_secs(8));
        state.record_fetch(2, 20, -1, 30, now + Duration::from_secs(12));
        let request = state
            .shrink(1, lag, now + Duration::from_secs(12))
            .expect("shrinks");
        assert_eq!(request.isr, vec![1, 2]);
    }

    #[test]
    fn replicas_added_under_the_same_leadership_are_followed_and_removed_ones_forgotten() {
        let (mut state, now) = led(vec![1, 2], vec![1, 2]);
        state.record_fetch(2, 10, -1, 10, now);
        let mut image = state.image.clone();
        image.replicas = vec![1, 2, 3];
        image.adding = vec![3];
        image.partition_epoch += 1;
        state.update(&image, 1, now);
        assert!(
            state.record_fetch(3, 4, -1, 10, now),
            "the added replica is followed"
        );
        assert_eq!(
            state.high_watermark(1, 10),
            Some(10),
            "not in the ISR: not waited for"
        );
        state.record_fetch(3, 10, -1, 10, now);
        assert!(
            state.expansion(3, 10, 0).is_some(),
            "caught up: proposed for the ISR"
        );
        image.replicas = vec![1, 3];
        image.adding.clear();
        image.isr = vec![1, 3];
        image.partition_epoch += 1;
        state.update(&image, 1, now);
        assert!(
            !state.record_fetch(2, 10, -1, 10, now),
            "the removed replica is not"
        );
    }

    #[test]
    fn a_new_leadership_or_epoch_starts_progress_afresh() {
        let (mut state, now) = led(vec![1, 2], vec![1, 2]);
        state.record_fetch(2, 10, -1, 10, now);
        let mut image = state.image.clone();
        image.leader_epoch += 1;
        image.partition_epoch += 1;
        state.update(&image, 1, now);
        assert_eq!(state.high_watermark(1, 10), None);
    }

    #[test]
    fn a_replica_fetch_is_believed_only_with_the_current_broker_epoch() {
        let mut image = MetadataImage::default();
        let register = |incarnation_id| weir_metadata::MetadataCommand::RegisterBroker {
            node_id: 3,
            incarnation_id,
            listeners: Vec::new(),
            rack: None,
        };
        image.apply(&register(weir_metadata::Uuid::new_v4()));
        let first = image.broker(3).expect("registered").epoch;
        let first = i64::try_from(first).expect("fits an int64");
        assert_eq!(check_replica(&image, 3, Some(first)), Ok(()));
        assert_eq!(check_replica(&image, 3, None), Err(ReplicaRefusal::NoEpoch));
        assert_eq!(
            check_replica(&image, 2, Some(first)),
            Err(ReplicaRefusal::NotRegistered)
        );
        assert_eq!(
            check_replica(&image, 3, Some(first ^ 1)),
            Err(ReplicaRefusal::WrongEpoch {
                newer: first & 1 == 0
            })
        );
        assert_eq!(
            check_replica(&image, 3, Some(-1)),
            Err(ReplicaRefusal::WrongEpoch { newer: false })
        );
        // A restart registers again: the old epoch no longer proves anything, the new one
        // is larger.
        image.apply(&register(weir_metadata::Uuid::new_v4()));
        let second = i64::try_from(image.broker(3).expect("registered").epoch).expect("fits");
        assert!(second > first);
        assert_eq!(
            check_replica(&image, 3, Some(first)),
            Err(ReplicaRefusal::WrongEpoch { newer: false })
        );
        assert_eq!(check_replica(&image, 3, Some(second)), Ok(()));
    }
}
