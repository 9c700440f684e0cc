//! What this broker keeps for share groups (KIP-932) as the leader of their partitions: the
//! share-partition state machines (`weir_coordinator::share_partition`), one per group and
//! partition it leads, and the share sessions of the members fetching from it (ShareFetch's
//! session epochs).
//!
//! A share-partition is made at a leader epoch from the state its share coordinator keeps in
//! `__share_group_state` (`share_persister.rs`), and each change to it is stored there before
//! it is answered, so a new leader or a restarted broker goes on where the last one stopped;
//! records acquired and not yet acknowledged are delivered again.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;
use weir_coordinator::share_coordinator::records::SharePartitionKey;
use weir_coordinator::share_partition::{SharePartition, ShareSettings};

/// Share-partitions kept at most (group × partition), each a few hundred bytes plus its
/// records in flight. A new one past it is refused; none is evicted, since forgetting one
/// would move its group past records it never delivered.
pub const SHARE_PARTITIONS_MAX: usize = 100_000;
/// Partitions one share session holds at most, as a fetch session's.
pub const SESSION_PARTITIONS_MAX: usize = 50_000;
/// A session unused this long may be evicted to make room for a new one.
pub const SESSION_EVICTION_IDLE: Duration = Duration::from_secs(120);

/// Share sessions one connection is remembered to hold at most (a client has one per member
/// it runs); those past it close at their next error or are evicted idle, not with the
/// connection.
pub const CONNECTION_SESSIONS_MAX: usize = 1_000;

/// Share session epoch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// Share session epoch that closes a session.
pub const FINAL_EPOCH: i32 = -1;

/// A partition of a share group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    /// The group.
    pub group: Arc<str>,
    /// The topic's id.
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
}

/// Why a share session request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    /// SHARE_SESSION_NOT_FOUND: no session for the member (it was closed or evicted).
    NotFound,
    /// INVALID_SHARE_SESSION_EPOCH: the epoch is not the session's next.
    InvalidEpoch,
    /// SHARE_SESSION_LIMIT_REACHED: `group.share.max.share.sessions` sessions, none idle.
    LimitReached,
    /// INVALID_REQUEST: more than [`SESSION_PARTITIONS_MAX`] partitions.
    TooManyPartitions,
}

/// A topic's id and a partition of it.
pub type TopicPartitionId = (Uuid, i32);

/// A share session closed with its connection: whose, and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedSession {
    /// The group.
    pub group: Arc<str>,
    /// The member.
    pub member: Arc<str>,
    /// The session's partitions.
    pub partitions: Vec<TopicPartitionId>,
}

/// Whose session: (group, member).
type SessionKey = (Arc<str>, Arc<str>);

/// The share sessions a connection used last, so that they close when it does: a member
/// killed or cut off has its records released at once (as Kafka 4.4 does), not when their
/// locks expire.
#[derive(Debug)]
pub struct ConnectionShares {
    id: u64,
    held: Mutex<Vec<SessionKey>>,
}

impl Default for ConnectionShares {
    fn default() -> ConnectionShares {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionShares {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            held: Mutex::new(Vec::new()),
        }
    }
}

impl ConnectionShares {
    fn hold(&self, key: &SessionKey) {
        let mut held = lock(&self.held);
        if !held.contains(key) && held.len() < CONNECTION_SESSIONS_MAX {
            held.push(key.clone());
        }
    }
}

/// One member's share session.
#[derive(Debug)]
struct Session {
    /// The epoch its next request must carry.
    next_epoch: i32,
    /// The connection its last request came on.
    connection: u64,
    partitions: BTreeSet<(Uuid, i32)>,
    used: Instant,
}

/// One share-partition and the leader epoch it was made at: a newer epoch starts anew.
#[derive(Debug)]
struct Held {
    leader_epoch: i32,
    /// The state epoch of its durable state.
    state_epoch: i32,
    partition: SharePartition,
    /// Taken while its state is being stored: one write at a time, each of the newest state.
    writer: Arc<tokio::sync::Mutex<()>>,
}

/// Taken in turn by whoever stores a share-partition's state ([`ShareState::writer`]).
pub type StateWriter = Arc<tokio::sync::Mutex<()>>;

impl ShareKey {
    /// The key its share coordinator knows it by.
    pub fn persisted(&self) -> SharePartitionKey {
        SharePartitionKey {
            group: self.group.to_string(),
            topic_id: self.topic_id,
            partition: self.partition,
        }
    }
}

/// The broker's share-partitions and share sessions.
pub struct ShareState {
    settings: ShareSettings,
    max_sessions: usize,
    partitions: Mutex<HashMap<ShareKey, Held>>,
    sessions: Mutex<HashMap<SessionKey, Session>>,
    /// Taken while a share-partition is made from its durable state, so two first fetches
    /// do not both initialize it.
    pub(crate) making: tokio::sync::Mutex<()>,
}

impl ShareState {
    /// Empty, with the broker's `group.share.*` settings.
    pub fn new(settings: ShareSettings, max_sessions: usize) -> ShareState {
        ShareState {
            settings,
            max_sessions,
            partitions: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            making: tokio::sync::Mutex::new(()),
        }
    }

    /// The share-partition settings in force.
    pub fn settings(&self) -> ShareSettings {
        self.settings
    }

    /// Whether the share-partition `key` is made at `leader_epoch`.
    pub fn is_current(&self, key: &ShareKey, leader_epoch: i32) -> bool {
        lock(&self.partitions)
            .get(key)
            .is_some_and(|held| held.leader_epoch == leader_epoch)
    }

    /// Keeps `partition` as the share-partition `key` at `leader_epoch`, from durable state of
    /// `state_epoch`, unless one is kept at that epoch already; `false` when
    /// [`SHARE_PARTITIONS_MAX`] are held.
    pub fn install(
        &self,
        key: &ShareKey,
        (leader_epoch, state_epoch): (i32, i32),
        partition: SharePartition,
    ) -> bool {
        let mut partitions = lock(&self.partitions);
        match partitions.get(key) {
            Some(held) if held.leader_epoch == leader_epoch => return true,
            Some(_) => {}
            None if partitions.len() >= SHARE_PARTITIONS_MAX => return false,
            None => {}
        }
        partitions.insert(
            key.clone(),
            Held {
                leader_epoch,
                state_epoch,
                partition,
                writer: Arc::default(),
            },
        );
        true
    }

    /// Forgets the share-partition `key` if it is held at `leader_epoch` (its durable state
    /// moved on without it: the next fetch reads it again).
    pub fn forget(&self, key: &ShareKey, leader_epoch: i32) {
        let mut partitions = lock(&self.partitions);
        if partitions
            .get(key)
            .is_some_and(|held| held.leader_epoch == leader_epoch)
        {
            partitions.remove(key);
        }
    }

    /// The writer lock of the share-partition `key` at `leader_epoch` and its state epoch.
    pub fn writer(&self, key: &ShareKey, leader_epoch: i32) -> Option<(StateWriter, i32)> {
        lock(&self.partitions)
            .get(key)
            .filter(|held| held.leader_epoch == leader_epoch)
            .map(|held| (held.writer.clone(), held.state_epoch))
    }

    /// Runs `f` on the share-partition `key` if it exists at `leader_epoch`.
    pub fn with_existing<R>(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
        f: impl FnOnce(&mut SharePartition) -> R,
    ) -> Option<R> {
        let mut partitions = lock(&self.partitions);
        partitions
            .get_mut(key)
            .filter(|held| held.leader_epoch == leader_epoch)
            .map(|held| f(&mut held.partition))
    }

    /// Opens, continues or closes `member`'s session of `group` for a request at `epoch`,
    /// adding `added` and removing `forgotten`; returns the session's partitions (for a final
    /// request, those it had).
    pub fn session(
        &self,
        (group, member): (&str, &str),
        epoch: i32,
        (added, forgotten): (&[TopicPartitionId], &[TopicPartitionId]),
        (connection, now): (&ConnectionShares, Instant),
    ) -> Result<Vec<(Uuid, i32)>, SessionError> {
        let mut sessions = lock(&self.sessions);
        let key: SessionKey = (Arc::from(group), Arc::from(member));
        if epoch == INITIAL_EPOCH {
            if added.len() > SESSION_PARTITIONS_MAX {
                return Err(SessionError::TooManyPartitions);
            }
            if !sessions.contains_key(&key) && sessions.len() >= self.max_sessions {
                let idle = sessions
                    .iter()
                    .filter(|(_, s)| now.saturating_duration_since(s.used) >= SESSION_EVICTION_IDLE)
                    .min_by_key(|(_, s)| s.used)
                    .map(|(k, _)| k.clone());
                match idle {
                    Some(idle) => {
                        sessions.remove(&idle);
                    }
                    None => return Err(SessionError::LimitReached),
                }
            }
            let partitions: BTreeSet<(Uuid, i32)> = added.iter().copied().collect();
            let listed = partitions.iter().copied().collect();
            connection.hold(&key);
            sessions.insert(
                key,
                Session {
                    next_epoch: 1,
                    connection: connection.id,
                    partitions,
                    used: now,
                },
            );
            return Ok(listed);
        }
        let session = sessions.get_mut(&key).ok_or(SessionError::NotFound)?;
        if epoch == FINAL_EPOCH {
            let listed = session.partitions.iter().copied().collect();
            sessions.remove(&key);
            return Ok(listed);
        }
        if epoch != session.next_epoch {
            return Err(SessionError::InvalidEpoch);
        }
        if session.partitions.len() + added.len() > SESSION_PARTITIONS_MAX {
            return Err(SessionError::TooManyPartitions);
        }
        session.partitions.extend(added.iter().copied());
        for gone in forgotten {
            session.partitions.remove(gone);
        }
        session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        session.used = now;
        session.connection = connection.id;
        connection.hold(&key);
        Ok(session.partitions.iter().copied().collect())
    }

    /// Closes the sessions whose last request came on `connection`, which has closed: their
    /// (group, member, partitions), whose records the caller releases.
    pub fn close_connection(&self, connection: &ConnectionShares) -> Vec<ClosedSession> {
        let held = std::mem::take(&mut *lock(&connection.held));
        if held.is_empty() {
            return Vec::new();
        }
        let mut sessions = lock(&self.sessions);
        held.into_iter()
            .filter_map(|key| {
                let owned = sessions
                    .get(&key)
                    .is_some_and(|s| s.connection == connection.id);
                let session = owned.then(|| sessions.remove(&key)).flatten()?;
                Some(ClosedSession {
                    group: key.0,
                    member: key.1,
                    partitions: session.partitions.into_iter().collect(),
                })
            })
            .collect()
    }
}

/// Locks `mutex`, through a poisoned one: every change made under these locks is whole
/// before anything that could panic.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(max_sessions: usize) -> ShareState {
        ShareState::new(ShareSettings::default(), max_sessions)
    }

    #[test]
    fn sessions_open_continue_by_epoch_and_close() {
        let state = state(10);
        let c = ConnectionShares::default();
        let at = (&c, Instant::now());
        let t = Uuid::from_u128(1);
        let opened = state.session(("g", "m"), 0, (&[(t, 0), (t, 1)], &[]), at);
        assert_eq!(opened, Ok(vec![(t, 0), (t, 1)]));
        assert_eq!(
            state.session(("g", "m"), 2, (&[], &[]), at),
            Err(SessionError::InvalidEpoch)
        );
        let next = state.session(("g", "m"), 1, (&[(t, 2)], &[(t, 0)]), at);
        assert_eq!(next, Ok(vec![(t, 1), (t, 2)]));
        assert_eq!(
            state.session(("g", "m"), -1, (&[], &[]), at),
            Ok(vec![(t, 1), (t, 2)])
        );
        assert_eq!(
            state.session(("g", "m"), 2, (&[], &[]), at),
            Err(SessionError::NotFound)
        );
    }

    #[test]
    fn a_closed_connection_closes_the_sessions_it_used_last() {
        let state = state(10);
        let (first, second) = (ConnectionShares::default(), ConnectionShares::default());
        let now = Instant::now();
        let t = Uuid::from_u128(1);
        state
            .session(("g", "a"), 0, (&[(t, 0)], &[]), (&first, now))
            .expect("opened");
        state
            .session(("g", "b"), 0, (&[(t, 1)], &[]), (&first, now))
            .expect("opened");
        // b's member reconnected: its session is the second connection's now.
        state
            .session(("g", "b"), 1, (&[], &[]), (&second, now))
            .expect("continued");
        let closed = state.close_connection(&first);
        assert_eq!(
            closed,
            [ClosedSession {
                group: Arc::from("g"),
                member: Arc::from("a"),
                partitions: vec![(t, 0)]
            }]
        );
        assert_eq!(
            state.session(("g", "a"), 1, (&[], &[]), (&second, now)),
            Err(SessionError::NotFound)
        );
        assert!(state
            .session(("g", "b"), 2, (&[], &[]), (&second, now))
            .is_ok());
    }

    #[test]
    fn past_the_limit_an_idle_session_is_evicted_or_the_new_one_refused() {
        let state = state(1);
        let c = ConnectionShares::default();
        let now = Instant::now();
        state
            .session(("g", "a"), 0, (&[], &[]), (&c, now))
            .expect("first session");
        assert_eq!(
            state.session(("g", "b"), 0, (&[], &[]), (&c, now)),
            Err(SessionError::LimitReached)
        );
        let later = now + SESSION_EVICTION_IDLE;
        assert!(state
            .session(("g", "b"), 0, (&[], &[]), (&c, later))
            .is_ok());
        assert_eq!(
            state.session(("g", "a"), 1, (&[], &[]), (&c, later)),
            Err(SessionError::NotFound),
            "evicted"
        );
    }

    #[test]
    fn a_new_leader_epoch_starts_the_share_partition_anew() {
        let state = state(1);
        let key = ShareKey {
            group: Arc::from("g"),
            topic_id: Uuid::from_u128(1),
            partition: 0,
        };
        let settings = state.settings();
        assert!(state.install(&key, (3, 0), SharePartition::new(10, settings)));
        assert!(state.is_current(&key, 3));
        assert!(state.install(&key, (3, 0), SharePartition::new(99, settings)));
        let start = state.with_existing(&key, 3, |p| p.start_offset());
        assert_eq!(start, Some(10), "kept at the same epoch");
        assert_eq!(state.with_existing(&key, 4, |p| p.start_offset()), None);
        assert!(!state.is_current(&key, 4));
        assert!(state.install(&key, (4, 2), SharePartition::new(20, settings)));
        assert_eq!(state.with_existing(&key, 4, |p| p.start_offset()), Some(20));
        assert_eq!(state.writer(&key, 4).map(|(_, epoch)| epoch), Some(2));
        state.forget(&key, 3);
        assert!(state.is_current(&key, 4), "only at its own epoch");
        state.forget(&key, 4);
        assert!(!state.is_current(&key, 4));
    }
}
