//! The states of a group as Kafka reports them, under either protocol.

/// Where a group is in its rebalance cycle (Kafka's names, as DescribeGroups reports them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members; the group may still hold committed offsets.
    Empty,
    /// Waiting for every member to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Consumer group protocol: the target assignment is being computed.
    Assigning,
    /// Consumer group protocol: members are moving to the target assignment.
    Reconciling,
}

impl GroupState {
    /// The state's name in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
        }
    }
}
