//! The broker over real TCP connections: the protocol, durability on a disk that can lose power
//! or fill up, and hostile clients.

mod authorization;
mod cluster;
mod common;
mod consumer_groups;
mod durability;
mod hostile;
mod protocol;
mod replication;
mod share_groups;
mod simulation;
mod transactions;
