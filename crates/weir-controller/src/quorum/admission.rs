//! Who may hold a connection to the controller port. The quorum's members (its voters and its
//! observers, which are every broker of the cluster) connect from the addresses their
//! controller listeners have; their connections have places of their own. Connections from
//! any other address share a small budget apart, a few per address, so that a flood from
//! elsewhere cannot take the places peers need to heartbeat, vote and replicate.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Connections from one member's address: its controller's Raft connection, its forwarded
/// requests' connections, and those of other members on the same host.
pub(super) const MEMBER_CONNECTIONS_PER_ADDRESS_MAX: u32 = 128;
/// Connections from addresses that are no member's, in all.
pub(super) const STRANGER_CONNECTIONS_MAX: u32 = 32;
/// Connections from one address that is no member's (a broker asking to join is one).
pub(super) const STRANGER_CONNECTIONS_PER_ADDRESS_MAX: u32 = 4;
/// Least time between two warnings about refused connections.
const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Which budget a refused connection found full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// Its member address holds [`MEMBER_CONNECTIONS_PER_ADDRESS_MAX`].
    MemberAddress,
    /// Connections from other addresses hold [`STRANGER_CONNECTIONS_MAX`].
    Strangers,
    /// Its address, no member's, holds [`STRANGER_CONNECTIONS_PER_ADDRESS_MAX`].
    StrangerAddress,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Full::MemberAddress => write!(
                f,
                "the address of a quorum member holds {MEMBER_CONNECTIONS_PER_ADDRESS_MAX} connections"
            ),
            Full::Strangers => write!(
                f,
                "addresses of no quorum member hold {STRANGER_CONNECTIONS_MAX} connections"
            ),
            Full::StrangerAddress => write!(
                f,
                "this address, no quorum member's, holds {STRANGER_CONNECTIONS_PER_ADDRESS_MAX} connections"
            ),
        }
    }
}

/// The connection counts of the controller port and the members' addresses.
#[derive(Default)]
pub(super) struct Admission {
    members: RwLock<HashSet<IpAddr>>,
    counts: Mutex<Counts>,
    warned: Mutex<Warned>,
}

#[derive(Default)]
struct Counts {
    /// Open connections by address, as admitted (member or not).
    by_address: HashMap<(IpAddr, bool), u32>,
    strangers: u32,
}

#[derive(Default)]
struct Warned {
    last: Option<Instant>,
    suppressed: u64,
}

/// An admitted connection's place, given back when dropped.
pub(super) struct Place {
    admission: Arc<Admission>,
    address: IpAddr,
    member: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = lock(&self.admission.counts);
        let key = (self.address, self.member);
        if let Some(count) = counts.by_address.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                counts.by_address.remove(&key);
            }
        }
        if !self.member {
            counts.strangers -= 1;
        }
    }
}

impl Admission {
    /// Sets the addresses the quorum's members connect from.
    pub(super) fn set_members(&self, members: HashSet<IpAddr>) {
        *self.members.write().unwrap_or_else(|e| e.into_inner()) = members;
    }

    /// A place for a connection from `address`, or the budget that has none.
    pub(super) fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Place, Full> {
        let address = address.to_canonical();
        let member = self
            .members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&address);
        let mut counts = lock(&self.counts);
        let here = counts
            .by_address
            .get(&(address, member))
            .copied()
            .unwrap_or(0);
        match member {
            true if here >= MEMBER_CONNECTIONS_PER_ADDRESS_MAX => return Err(Full::MemberAddress),
            false if counts.strangers >= STRANGER_CONNECTIONS_MAX => return Err(Full::Strangers),
            false if here >= STRANGER_CONNECTIONS_PER_ADDRESS_MAX => {
                return Err(Full::StrangerAddress)
            }
            _ => {}
        }
        *counts.by_address.entry((address, member)).or_default() += 1;
        if !member {
            counts.strangers += 1;
        }
        Ok(Place {
            admission: self.clone(),
            address,
            member,
        })
    }

    /// Whether to warn about a refused connection now, and how many refusals went unsaid
    /// since the last warning: at most one warning per [`WARN_INTERVAL`].
    pub(super) fn warn_now(&self) -> Option<u64> {
        let mut warned = lock(&self.warned);
        let now = Instant::now();
        match warned.last {
            Some(last) if now.duration_since(last) < WARN_INTERVAL => {
                warned.suppressed += 1;
                None
            }
            _ => {
                warned.last = Some(now);
                Some(std::mem::take(&mut warned.suppressed))
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strangers_share_a_budget_apart_from_members() {
        let admission = Arc::new(Admission::default());
        let member: IpAddr = "10.0.0.1".parse().expect("an address");
        admission.set_members(HashSet::from([member]));
        let stranger = |i: u8| IpAddr::from([10, 0, 1, i]);
        let mut held = Vec::new();
        for _ in 0..STRANGER_CONNECTIONS_PER_ADDRESS_MAX {
            held.push(
                admission
                    .admit(stranger(0))
                    .expect("within its address's share"),
            );
        }
        assert_eq!(
            admission.admit(stranger(0)).err(),
            Some(Full::StrangerAddress)
        );
        let mut i = 1;
        while held.len() < STRANGER_CONNECTIONS_MAX as usize {
            held.push(
                admission
                    .admit(stranger(i))
                    .expect("within the strangers' budget"),
            );
            i += 1;
        }
        assert_eq!(admission.admit(stranger(200)).err(), Some(Full::Strangers));
        // The member is not touched by any of it, also as an IPv4-mapped IPv6 address.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("an address");
        let mut members = Vec::new();
        for _ in 0..MEMBER_CONNECTIONS_PER_ADDRESS_MAX {
            members.push(admission.admit(mapped).expect("a member's place"));
        }
        assert_eq!(admission.admit(member).err(), Some(Full::MemberAddress));
        // Places come back when connections close.
        held.clear();
        members.pop();
        assert!(admission.admit(stranger(200)).is_ok());
        assert!(admission.admit(member).is_ok());
    }

    #[test]
    fn an_address_that_becomes_a_member_keeps_its_stranger_places_apart() {
        let admission = Arc::new(Admission::default());
        let address: IpAddr = "10.0.0.2".parse().expect("an address");
        let early = admission.admit(address).expect("a stranger's place");
        admission.set_members(HashSet::from([address]));
        let later = admission.admit(address).expect("a member's place");
        drop(early);
        drop(later);
        assert!(lock(&admission.counts).by_address.is_empty());
        assert_eq!(lock(&admission.counts).strangers, 0);
    }
}
