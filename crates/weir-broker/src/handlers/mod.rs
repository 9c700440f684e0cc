//! One module per Kafka API (or small family); [`dispatch`] routes a decoded request to it and
//! encodes the answer as a typed [`Reply`]. Version ranges are declared in
//! `weir_proto::SUPPORTED_APIS`; each handler serves every version listed there.

mod acls;
mod admin_configs;
mod admin_topics;
mod api_versions;
mod client_quotas;
mod cluster;
mod consumer_groups;
mod delete_records;
pub(crate) mod errors;
mod fetch;
pub(crate) mod groups;
mod list_offsets;
mod log_dirs;
mod metadata;
mod offsets;
mod operations;
mod produce;
mod producer_id;
mod reassignments;
pub(crate) mod scram_credentials;
pub(crate) mod share_fetch;
pub(crate) mod share_group_state;
mod share_groups;
mod transactions;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use weir_proto::{encode_response, Request};

use crate::broker::Broker;
use crate::partition::Partition;
use crate::reply::{PendingReply, Reply, ResponseFrame};
use crate::request_context::RequestContext;
use crate::request_quota::{QuotaClient, RequestMeter};

/// Encodes a response, or — when it cannot be encoded at the request's version, a handler bug —
/// logs it and closes the connection, so the client learns at once instead of timing out.
pub(crate) fn encode(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, Reply> {
    encode_response(api_key, version, correlation_id, body).map_err(|error| {
        tracing::error!(target: "weir::server", ?api_key, version, %error, "could not encode response; closing the connection");
        Reply::Close
    })
}

/// The partition `index` of `topic` if this broker leads it: only the leader takes writes and
/// serves clients. A partition the cluster has but this broker does not lead (a follower
/// here, or hosted elsewhere) is NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata
/// and goes to the leader; one the cluster lacks is UNKNOWN_TOPIC_OR_PARTITION.
pub(crate) fn led_partition(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> Result<Arc<Partition>, ResponseError> {
    match broker.partitions.get(topic, index) {
        Some(partition) if partition.is_leader() => Ok(partition),
        Some(_) => Err(ResponseError::NotLeaderOrFollower),
        None if broker
            .image()
            .topic(topic)
            .is_some_and(|t| t.partition(index).is_some()) =>
        {
            Err(ResponseError::NotLeaderOrFollower)
        }
        None => Err(ResponseError::UnknownTopicOrPartition),
    }
}

pub(crate) fn frame(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: ResponseKind,
) -> Reply {
    match encode(api_key, version, correlation_id, &body) {
        Ok(bytes) => Reply::Frame(ResponseFrame::bytes(bytes)),
        Err(reply) => reply,
    }
}

/// Starts handling `request` from the client `context` names. Produce validates and appends here,
/// before this returns, so batches from one connection reach the log in the order they were
/// sent; everything else (waiting for fsync, long polls, rebalances, admin changes) happens in
/// the returned future. The handling of a client with a `request_percentage` quota is timed
/// and counted against it (`request_quota.rs`).
pub async fn dispatch(
    broker: &Arc<Broker>,
    request: Request,
    context: &RequestContext,
) -> PendingReply {
    let client_id = request.header.client_id.as_deref();
    let Some(meter) = RequestMeter::start(broker, context, client_id) else {
        return route(broker, request, context, None).await;
    };
    let pending = route(broker, request, context, Some(meter.clone())).await;
    meter.timed(pending)
}

/// Hands `request` to its API's handler; `meter` times it for a request quota.
async fn route(
    broker: &Arc<Broker>,
    request: Request,
    context: &RequestContext,
    meter: Option<Arc<RequestMeter>>,
) -> PendingReply {
    let peer = context.peer;
    let listener = context.listener.clone();
    let access = broker.access(context);
    let Request {
        header,
        api_key,
        version,
        body,
    } = request;
    let correlation_id = header.correlation_id;
    let broker = broker.clone();
    let fetch_meter = meter.clone();
    let respond = move |mut body: ResponseKind| {
        if let Some(meter) = &meter {
            meter.throttle(&mut body);
        }
        frame(api_key, version, correlation_id, body)
    };
    match body {
        RequestKind::Produce(req) => {
            let throttle = produce::throttle(&broker, context, header.client_id.as_deref(), &req);
            let pending = produce::append(&broker, req, version, &access).await;
            Box::pin(async move {
                pending
                    .finish(|mut r| {
                        r.throttle_time_ms =
                            i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
                        respond(ResponseKind::Produce(r))
                    })
                    .await
            })
        }
        RequestKind::Fetch(req) => {
            let quota = (
                QuotaClient::of(&broker, context, header.client_id.as_deref()),
                fetch_meter,
            );
            Box::pin(async move {
                let request = (version, correlation_id);
                fetch::handle(&broker, req, request, (peer, &access), quota).await
            })
        }
        RequestKind::ListOffsets(req) => Box::pin(async move {
            respond(ResponseKind::ListOffsets(
                list_offsets::handle(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::Metadata(req) => Box::pin(async move {
            respond(ResponseKind::Metadata(
                metadata::handle(&broker, req, version, (&listener, &access)).await,
            ))
        }),
        RequestKind::ApiVersions(req) => Box::pin(async move {
            respond(ResponseKind::ApiVersions(api_versions::handle(
                &broker, &req, version,
            )))
        }),
        RequestKind::CreateTopics(req) => {
            let client = QuotaClient::of(&broker, context, header.client_id.as_deref());
            Box::pin(async move {
                respond(ResponseKind::CreateTopics(
                    admin_topics::create_topics(&broker, req, (version, &access), client).await,
                ))
            })
        }
        RequestKind::DeleteTopics(req) => {
            let client = QuotaClient::of(&broker, context, header.client_id.as_deref());
            Box::pin(async move {
                respond(ResponseKind::DeleteTopics(
                    admin_topics::delete_topics(&broker, req, (version, &access), client).await,
                ))
            })
        }
        RequestKind::CreatePartitions(req) => {
            let client = QuotaClient::of(&broker, context, header.client_id.as_deref());
            Box::pin(async move {
                respond(ResponseKind::CreatePartitions(
                    admin_topics::create_partitions(&broker, req, (version, &access), client).await,
                ))
            })
        }
        RequestKind::DescribeConfigs(req) => Box::pin(async move {
            respond(ResponseKind::DescribeConfigs(
                admin_configs::describe_configs(&broker, req, version, &access),
            ))
        }),
        RequestKind::AlterConfigs(req) => Box::pin(async move {
            respond(ResponseKind::AlterConfigs(
                admin_configs::alter_configs(&broker, req, &access).await,
            ))
        }),
        RequestKind::IncrementalAlterConfigs(req) => Box::pin(async move {
            respond(ResponseKind::IncrementalAlterConfigs(
                admin_configs::incremental_alter_configs(&broker, req, &access).await,
            ))
        }),
        RequestKind::InitProducerId(req) => Box::pin(async move {
            respond(ResponseKind::InitProducerId(
                producer_id::handle(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::OffsetForLeaderEpoch(req) => Box::pin(async move {
            respond(ResponseKind::OffsetForLeaderEpoch(
                cluster::offset_for_leader_epoch(&broker, req, &access),
            ))
        }),
        RequestKind::DescribeCluster(req) => Box::pin(async move {
            respond(ResponseKind::DescribeCluster(cluster::describe_cluster(
                &broker,
                req,
                (&listener, &access),
            )))
        }),
        RequestKind::DescribeQuorum(req) => Box::pin(async move {
            respond(ResponseKind::DescribeQuorum(
                cluster::describe_quorum(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::FindCoordinator(req) => Box::pin(async move {
            respond(ResponseKind::FindCoordinator(
                groups::find_coordinator(&broker, req, version, (&listener, &access)).await,
            ))
        }),
        RequestKind::JoinGroup(req) => Box::pin(async move {
            let client_id = header.client_id.as_ref().map(|s| s.as_str());
            respond(ResponseKind::JoinGroup(
                groups::join_group(
                    &broker,
                    req,
                    version,
                    client_id,
                    (format!("/{peer}"), &access),
                )
                .await,
            ))
        }),
        RequestKind::SyncGroup(req) => Box::pin(async move {
            respond(ResponseKind::SyncGroup(
                groups::sync_group(&broker, req, &access).await,
            ))
        }),
        RequestKind::Heartbeat(req) => Box::pin(async move {
            respond(ResponseKind::Heartbeat(groups::heartbeat(
                &broker, req, &access,
            )))
        }),
        RequestKind::LeaveGroup(req) => Box::pin(async move {
            respond(ResponseKind::LeaveGroup(
                groups::leave_group(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::ListGroups(req) => Box::pin(async move {
            respond(ResponseKind::ListGroups(groups::list_groups(
                &broker, req, &access,
            )))
        }),
        RequestKind::DescribeGroups(req) => Box::pin(async move {
            respond(ResponseKind::DescribeGroups(groups::describe_groups(
                &broker, req, version, &access,
            )))
        }),
        RequestKind::DeleteGroups(req) => Box::pin(async move {
            respond(ResponseKind::DeleteGroups(
                groups::delete_groups(&broker, req, &access).await,
            ))
        }),
        RequestKind::ConsumerGroupHeartbeat(req) => Box::pin(async move {
            let client_id = header.client_id.as_ref().map(|s| s.as_str());
            respond(ResponseKind::ConsumerGroupHeartbeat(
                consumer_groups::heartbeat(
                    &broker,
                    req,
                    version,
                    client_id,
                    (format!("/{peer}"), &access),
                )
                .await,
            ))
        }),
        RequestKind::ConsumerGroupDescribe(req) => Box::pin(async move {
            respond(ResponseKind::ConsumerGroupDescribe(
                consumer_groups::describe(&broker, req, version, &access),
            ))
        }),
        RequestKind::ShareGroupHeartbeat(req) => Box::pin(async move {
            let client_id = header.client_id.as_ref().map(|s| s.as_str());
            respond(ResponseKind::ShareGroupHeartbeat(share_groups::heartbeat(
                &broker,
                req,
                client_id,
                (format!("/{peer}"), &access),
            )))
        }),
        RequestKind::ShareGroupDescribe(req) => Box::pin(async move {
            respond(ResponseKind::ShareGroupDescribe(share_groups::describe(
                &broker, req, &access,
            )))
        }),
        // The connection's share sessions are cloned for these two only (not on every
        // request's path).
        RequestKind::ShareFetch(req) => {
            let share_sessions = context.share_sessions.clone();
            Box::pin(async move {
                respond(ResponseKind::ShareFetch(
                    share_fetch::fetch(&broker, req, (&access, &share_sessions)).await,
                ))
            })
        }
        RequestKind::ShareAcknowledge(req) => {
            let share_sessions = context.share_sessions.clone();
            Box::pin(async move {
                respond(ResponseKind::ShareAcknowledge(
                    share_fetch::acknowledge(&broker, req, (&access, &share_sessions)).await,
                ))
            })
        }
        RequestKind::DescribeShareGroupOffsets(req) => Box::pin(async move {
            respond(ResponseKind::DescribeShareGroupOffsets(
                share_groups::describe_offsets(&broker, req, &access).await,
            ))
        }),
        RequestKind::InitializeShareGroupState(req) => Box::pin(async move {
            respond(ResponseKind::InitializeShareGroupState(
                share_group_state::initialize(&broker, req, &access).await,
            ))
        }),
        RequestKind::ReadShareGroupState(req) => Box::pin(async move {
            respond(ResponseKind::ReadShareGroupState(
                share_group_state::read(&broker, req, &access).await,
            ))
        }),
        RequestKind::WriteShareGroupState(req) => Box::pin(async move {
            respond(ResponseKind::WriteShareGroupState(
                share_group_state::write(&broker, req, &access).await,
            ))
        }),
        RequestKind::DeleteShareGroupState(req) => Box::pin(async move {
            respond(ResponseKind::DeleteShareGroupState(
                share_group_state::delete(&broker, req, &access).await,
            ))
        }),
        RequestKind::ReadShareGroupStateSummary(req) => Box::pin(async move {
            respond(ResponseKind::ReadShareGroupStateSummary(
                share_group_state::read_summary(&broker, req, &access),
            ))
        }),
        RequestKind::OffsetCommit(req) => Box::pin(async move {
            respond(ResponseKind::OffsetCommit(
                offsets::commit(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::OffsetFetch(req) => Box::pin(async move {
            respond(ResponseKind::OffsetFetch(offsets::fetch(
                &broker, req, version, &access,
            )))
        }),
        RequestKind::OffsetDelete(req) => Box::pin(async move {
            respond(ResponseKind::OffsetDelete(
                offsets::delete(&broker, req, &access).await,
            ))
        }),
        RequestKind::DescribeLogDirs(req) => Box::pin(async move {
            respond(ResponseKind::DescribeLogDirs(log_dirs::describe(
                &broker, req, version, &access,
            )))
        }),
        RequestKind::AlterPartitionReassignments(req) => Box::pin(async move {
            respond(ResponseKind::AlterPartitionReassignments(
                reassignments::alter(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::AlterUserScramCredentials(req) => Box::pin(async move {
            respond(ResponseKind::AlterUserScramCredentials(
                scram_credentials::alter(&broker, req, &access).await,
            ))
        }),
        RequestKind::DescribeUserScramCredentials(req) => Box::pin(async move {
            respond(ResponseKind::DescribeUserScramCredentials(
                scram_credentials::describe(&broker, req, &access),
            ))
        }),
        RequestKind::AlterClientQuotas(req) => Box::pin(async move {
            respond(ResponseKind::AlterClientQuotas(
                client_quotas::alter(&broker, req, &access).await,
            ))
        }),
        RequestKind::DescribeClientQuotas(req) => Box::pin(async move {
            respond(ResponseKind::DescribeClientQuotas(client_quotas::describe(
                &broker, req, &access,
            )))
        }),
        RequestKind::CreateAcls(req) => Box::pin(async move {
            respond(ResponseKind::CreateAcls(
                acls::create(&broker, req, &access).await,
            ))
        }),
        RequestKind::DescribeAcls(req) => Box::pin(async move {
            respond(ResponseKind::DescribeAcls(acls::describe(
                &broker, req, &access,
            )))
        }),
        RequestKind::DeleteAcls(req) => Box::pin(async move {
            respond(ResponseKind::DeleteAcls(
                acls::delete(&broker, req, &access).await,
            ))
        }),
        // A connection that authenticated (or never had to) has no SASL exchange to continue.
        RequestKind::SaslHandshake(_) => Box::pin(async move {
            let mut response = SaslHandshakeResponse::default();
            response.error_code = ResponseError::IllegalSaslState.code();
            respond(ResponseKind::SaslHandshake(response))
        }),
        RequestKind::SaslAuthenticate(_) => Box::pin(async move {
            let mut response = SaslAuthenticateResponse::default();
            response.error_code = ResponseError::IllegalSaslState.code();
            response.error_message = Some(str_bytes(
                "SaslAuthenticate on a connection with no SASL exchange under way",
            ));
            respond(ResponseKind::SaslAuthenticate(response))
        }),
        RequestKind::ListPartitionReassignments(req) => Box::pin(async move {
            respond(ResponseKind::ListPartitionReassignments(
                reassignments::list(&broker, req, &access),
            ))
        }),
        RequestKind::ElectLeaders(req) => Box::pin(async move {
            respond(ResponseKind::ElectLeaders(
                reassignments::elect(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::DeleteRecords(req) => Box::pin(async move {
            respond(ResponseKind::DeleteRecords(
                delete_records::handle(&broker, req, &access).await,
            ))
        }),
        RequestKind::AddPartitionsToTxn(req) => Box::pin(async move {
            respond(ResponseKind::AddPartitionsToTxn(
                transactions::add_partitions(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::AddOffsetsToTxn(req) => Box::pin(async move {
            respond(ResponseKind::AddOffsetsToTxn(
                transactions::add_offsets(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::TxnOffsetCommit(req) => Box::pin(async move {
            respond(ResponseKind::TxnOffsetCommit(
                offsets::commit_transactional(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::EndTxn(req) => Box::pin(async move {
            respond(ResponseKind::EndTxn(
                transactions::end(&broker, req, version, &access).await,
            ))
        }),
        RequestKind::DescribeProducers(req) => Box::pin(async move {
            respond(ResponseKind::DescribeProducers(
                transactions::describe_producers(&broker, req, &access),
            ))
        }),
        RequestKind::DescribeTransactions(req) => Box::pin(async move {
            respond(ResponseKind::DescribeTransactions(transactions::describe(
                &broker, req, &access,
            )))
        }),
        RequestKind::ListTransactions(req) => Box::pin(async move {
            respond(ResponseKind::ListTransactions(transactions::list(
                &broker, req, version, &access,
            )))
        }),
        RequestKind::WriteTxnMarkers(req) => Box::pin(async move {
            respond(ResponseKind::WriteTxnMarkers(
                transactions::write_markers(&broker, req, &access).await,
            ))
        }),
        other => {
            // Unreachable: decode_request refuses APIs missing from SUPPORTED_APIS, and every
            // API listed there has an arm above.
            tracing::error!(target: "weir::server", request = ?std::mem::discriminant(&other), "no handler for a supported API; closing the connection");
            Box::pin(async { Reply::Close })
        }
    }
}

/// A protocol string from an owned string.
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::FetchResponse;

    use super::*;

    #[test]
    fn a_response_that_cannot_be_encoded_closes_the_connection() {
        // `session_id` exists in Fetch responses from v7: at v4 the encoder must refuse it.
        let mut response = FetchResponse::default();
        response.session_id = 5;
        assert!(matches!(
            frame(ApiKey::Fetch, 4, 1, ResponseKind::Fetch(response.clone())),
            Reply::Close
        ));
        assert!(matches!(
            frame(ApiKey::Fetch, 7, 1, ResponseKind::Fetch(response)),
            Reply::Frame(_)
        ));
    }
}
