//! Incremental fetch sessions (KIP-227). A consumer (or, later, a follower) that opens a
//! session sends each partition once; later fetches name only what changed (new positions,
//! partitions added or forgotten), and the answer lists only partitions with something new:
//! records, an error, or a moved high watermark, last stable offset or log start offset.
//!
//! Sessions live in a bounded cache (`max.incremental.fetch.session.cache.slots`, at most
//! [`SESSION_PARTITIONS_MAX`] partitions each and [`CACHED_PARTITIONS_MAX`] in all); when it is
//! full, an idle session older than
//! [`EVICTION_IDLE`] makes room, and otherwise the fetch is served without a session (id 0), as
//! Kafka does. Errors are Kafka's: FETCH_SESSION_ID_NOT_FOUND for a session not (or no longer)
//! here, INVALID_FETCH_SESSION_EPOCH for an epoch other than the next one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::TopicName;
use kafka_protocol::ResponseError;
use uuid::Uuid;

/// Epoch of a request that opens a new session (closing the one it names, if any).
const INITIAL_EPOCH: i32 = 0;
/// Epoch of a request that closes the session it names and fetches without one.
const FINAL_EPOCH: i32 = -1;
/// Most partitions one session holds; a larger fetch is served without a session.
pub const SESSION_PARTITIONS_MAX: usize = 50_000;
/// Most partitions all sessions hold together (a few hundred bytes each): past it, fetches are
/// served without a session, so no number of clients can make the cache grow without bound.
pub const CACHED_PARTITIONS_MAX: usize = 500_000;
/// A session unused this long may be evicted to make room for a new one.
pub const EVICTION_IDLE: Duration = Duration::from_secs(120);

/// A partition as a fetch names it: by topic id from Fetch v13, by name before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    /// The topic's name (empty from v13, where ids name topics).
    pub name: TopicName,
    /// The topic's id (nil before v13).
    pub topic_id: Uuid,
    /// The partition index.
    pub partition: i32,
}

/// What a client was last told of a partition, to decide whether the next answer lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset.
    pub last_stable_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
}

struct SessionPartition {
    key: PartitionKey,
    request: FetchPartition,
    reported: Option<Reported>,
}

struct Session {
    /// The epoch the next incremental fetch must carry.
    next_epoch: i32,
    partitions: Vec<SessionPartition>,
    index: HashMap<PartitionKey, usize>,
    last_used: Instant,
}

impl Session {
    fn upsert(&mut self, key: PartitionKey, request: FetchPartition) {
        match self.index.get(&key) {
            Some(&at) => self.partitions[at].request = request,
            None => {
                self.index.insert(key.clone(), self.partitions.len());
                self.partitions.push(SessionPartition {
                    key,
                    request,
                    reported: None,
                });
            }
        }
    }

    fn forget(&mut self, forgotten: &[PartitionKey]) {
        if forgotten.is_empty() {
            return;
        }
        self.partitions.retain(|p| !forgotten.contains(&p.key));
        self.index = self
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (p.key.clone(), i))
            .collect();
    }
}

/// How one fetch is to be served.
pub struct SessionFetch {
    /// The session id the answer carries (0: none).
    pub session_id: i32,
    /// True when the answer lists only partitions with something new.
    pub incremental: bool,
    /// Every partition to read, in the session's order.
    pub partitions: Vec<(PartitionKey, FetchPartition)>,
}

/// The broker's fetch sessions.
pub struct FetchSessions {
    slots: usize,
    sessions: Mutex<HashMap<i32, Session>>,
}

impl FetchSessions {
    /// A cache of at most `slots` sessions (0 turns sessions off).
    pub fn new(slots: usize) -> FetchSessions {
        FetchSessions {
            slots,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Session>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides how a fetch naming `wanted` (added or updated partitions) and `forgotten` is
    /// served for `session_id` at `epoch`; an error is the fetch's answer.
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        wanted: Vec<(PartitionKey, FetchPartition)>,
        forgotten: Vec<PartitionKey>,
    ) -> Result<SessionFetch, ResponseError> {
        if session_id == 0 && epoch == FINAL_EPOCH {
            // No session wanted (most fetches of clients without sessions): nothing to lock.
            return Ok(SessionFetch {
                session_id: 0,
                incremental: false,
                partitions: wanted,
            });
        }
        let now = Instant::now();
        let mut sessions = self.lock();
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if session_id != 0 {
                sessions.remove(&session_id);
            }
            let session_id = if epoch == INITIAL_EPOCH {
                self.open(&mut sessions, &wanted, now)
            } else {
                0
            };
            return Ok(SessionFetch {
                session_id,
                incremental: false,
                partitions: wanted,
            });
        }
        let held = cached_partitions(&sessions);
        let Some(session) = sessions.get_mut(&session_id) else {
            return Err(ResponseError::FetchSessionIdNotFound);
        };
        if epoch != session.next_epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        let before = session.partitions.len();
        for (key, request) in wanted {
            session.upsert(key, request);
        }
        session.forget(&forgotten);
        let now_held = session.partitions.len();
        let too_large = now_held > SESSION_PARTITIONS_MAX;
        if too_large || (now_held > before && held - before + now_held > CACHED_PARTITIONS_MAX) {
            // Too large to keep: the client starts over with a full fetch.
            sessions.remove(&session_id);
            return Err(ResponseError::FetchSessionIdNotFound);
        }
        session.next_epoch = next_epoch(epoch);
        session.last_used = now;
        Ok(SessionFetch {
            session_id,
            incremental: true,
            partitions: session
                .partitions
                .iter()
                .map(|p| (p.key.clone(), p.request.clone()))
                .collect(),
        })
    }

    /// Opens a session for `wanted` when there is room; its id, or 0.
    fn open(
        &self,
        sessions: &mut HashMap<i32, Session>,
        wanted: &[(PartitionKey, FetchPartition)],
        now: Instant,
    ) -> i32 {
        if self.slots == 0
            || wanted.len() > SESSION_PARTITIONS_MAX
            || cached_partitions(sessions) + wanted.len() > CACHED_PARTITIONS_MAX
        {
            return 0;
        }
        if sessions.len() >= self.slots {
            let idlest = sessions
                .iter()
                .filter(|(_, s)| now.duration_since(s.last_used) >= EVICTION_IDLE)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id);
            match idlest {
                Some(id) => {
                    sessions.remove(&id);
                }
                None => return 0,
            }
        }
        let id = loop {
            let id = (Uuid::new_v4().as_u128() as i32) & i32::MAX;
            if id != 0 && !sessions.contains_key(&id) {
                break id;
            }
        };
        let mut session = Session {
            next_epoch: 1,
            partitions: Vec::with_capacity(wanted.len()),
            index: HashMap::with_capacity(wanted.len()),
            last_used: now,
        };
        for (key, request) in wanted {
            session.upsert(key.clone(), request.clone());
        }
        sessions.insert(id, session);
        id
    }

    /// Records what the answer told the client of each partition, and returns, for each, whether
    /// an incremental answer lists it: it has records or an error, or its offsets moved since
    /// the client last heard of them.
    pub fn report(&self, session_id: i32, answers: &[(PartitionKey, Reported, bool)]) -> Vec<bool> {
        if session_id == 0 {
            return vec![true; answers.len()];
        }
        let mut sessions = self.lock();
        let Some(session) = sessions.get_mut(&session_id) else {
            return vec![true; answers.len()];
        };
        answers
            .iter()
            .map(|(key, now, has_news)| {
                let Some(&at) = session.index.get(key) else {
                    return true;
                };
                let partition = &mut session.partitions[at];
                let moved = partition.reported != Some(*now);
                partition.reported = Some(*now);
                *has_news || moved
            })
            .collect()
    }

    /// Closes the session `session_id` (none when 0 or already gone).
    pub fn close(&self, session_id: i32) {
        if session_id != 0 {
            self.lock().remove(&session_id);
        }
    }

    /// Sessions held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Partitions held by all sessions.
fn cached_partitions(sessions: &HashMap<i32, Session>) -> usize {
    sessions.values().map(|s| s.partitions.len()).sum()
}

/// The epoch after `epoch`, wrapping past `i32::MAX` to 1 (0 and -1 mean open and close).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(partition: i32) -> PartitionKey {
        PartitionKey {
            name: TopicName(kafka_protocol::protocol::StrBytes::from_static_str("t")),
            topic_id: Uuid::nil(),
            partition,
        }
    }

    fn at(partition: i32, offset: i64) -> (PartitionKey, FetchPartition) {
        let mut p = FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = offset;
        (key(partition), p)
    }

    const SEEN: Reported = Reported {
        high_watermark: 5,
        last_stable_offset: 5,
        log_start_offset: 0,
    };

    #[test]
    fn a_session_keeps_partitions_and_lists_only_what_changed() {
        let sessions = FetchSessions::new(10);
        let full = sessions
            .begin(0, INITIAL_EPOCH, vec![at(0, 0), at(1, 0)], Vec::new())
            .expect("opened");
        assert_ne!(full.session_id, 0);
        assert!(!full.incremental);
        let id = full.session_id;
        assert_eq!(
            sessions.report(id, &[(key(0), SEEN, false), (key(1), SEEN, false)]),
            [true, true]
        );
        let next = sessions
            .begin(id, 1, Vec::new(), Vec::new())
            .expect("incremental");
        assert!(next.incremental);
        assert_eq!(next.partitions.len(), 2, "both partitions are still read");
        let moved = Reported {
            high_watermark: 6,
            ..SEEN
        };
        assert_eq!(
            sessions.report(id, &[(key(0), SEEN, false), (key(1), moved, false)]),
            [false, true]
        );
        let forgot = sessions
            .begin(id, 2, vec![at(2, 3)], vec![key(0)])
            .expect("incremental");
        let keys: Vec<i32> = forgot.partitions.iter().map(|(k, _)| k.partition).collect();
        assert_eq!(keys, [1, 2]);
    }

    #[test]
    fn unknown_sessions_and_wrong_epochs_are_refused_and_final_closes() {
        let sessions = FetchSessions::new(10);
        assert_eq!(
            sessions.begin(1234, 1, Vec::new(), Vec::new()).err(),
            Some(ResponseError::FetchSessionIdNotFound)
        );
        let id = sessions
            .begin(0, INITIAL_EPOCH, vec![at(0, 0)], Vec::new())
            .expect("opened")
            .session_id;
        assert_eq!(
            sessions.begin(id, 5, Vec::new(), Vec::new()).err(),
            Some(ResponseError::InvalidFetchSessionEpoch)
        );
        let closed = sessions
            .begin(id, FINAL_EPOCH, vec![at(0, 0)], Vec::new())
            .expect("sessionless");
        assert_eq!(closed.session_id, 0);
        assert_eq!(sessions.len(), 0);
    }

    #[test]
    fn the_partitions_all_sessions_hold_are_bounded() {
        let sessions = FetchSessions::new(1000);
        let many: Vec<_> = (0..SESSION_PARTITIONS_MAX as i32)
            .map(|p| at(p, 0))
            .collect();
        let opened = (0..CACHED_PARTITIONS_MAX / SESSION_PARTITIONS_MAX + 1)
            .filter(|_| {
                let fetch = sessions.begin(0, INITIAL_EPOCH, many.clone(), Vec::new());
                fetch.expect("served").session_id != 0
            })
            .count();
        assert_eq!(opened, CACHED_PARTITIONS_MAX / SESSION_PARTITIONS_MAX);
    }

    #[test]
    fn a_full_cache_serves_without_a_session() {
        let sessions = FetchSessions::new(1);
        let first = sessions
            .begin(0, INITIAL_EPOCH, vec![at(0, 0)], Vec::new())
            .expect("opened");
        assert_ne!(first.session_id, 0);
        let second = sessions
            .begin(0, INITIAL_EPOCH, vec![at(0, 0)], Vec::new())
            .expect("served");
        assert_eq!(second.session_id, 0, "no idle session to evict");
        assert_eq!(sessions.len(), 1);
        assert_eq!(
            FetchSessions::new(0)
                .begin(0, 0, vec![at(0, 0)], Vec::new())
                .map(|f| f.session_id)
                .ok(),
            Some(0)
        );
    }
}
