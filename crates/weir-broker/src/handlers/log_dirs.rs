//! DescribeLogDirs: the replicas this broker holds in its log directory, with their sizes and
//! how far each is behind its high watermark (a replica being copied shows its lag), as
//! Kafka's reassignment and log-dirs tools read them.

use std::collections::HashSet;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::handlers::str_bytes;

/// Every replica hosted here, or those of the named partitions, grouped by topic.
pub fn describe(
    broker: &Broker,
    request: DescribeLogDirsRequest,
    version: i16,
    access: &Access,
) -> DescribeLogDirsResponse {
    // DESCRIBE on the cluster, or no directories (and, from v3, the error), as Kafka answers.
    if !access.cluster(AclOperation::Describe) {
        let mut response = DescribeLogDirsResponse::default();
        if version >= 3 {
            response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        }
        return response;
    }
    // The partitions asked for as a set: a request may name very many.
    let asked: Option<HashSet<(&str, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.as_str(), *p)))
            .collect()
    });
    let mut hosted = broker.partitions.all();
    hosted.retain(|p| {
        asked
            .as_ref()
            .is_none_or(|asked| asked.contains(&(p.topic.as_str(), p.index)))
    });
    hosted.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    let mut result = DescribeLogDirsResult::default();
    result.log_dir = str_bytes(broker.partitions.logs_dir().display().to_string());
    result.total_bytes = -1;
    result.usable_bytes = broker
        .partitions
        .available_bytes()
        .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    for partition in hosted {
        let (size, lag) = {
            let log = partition.log();
            let lag = (log.high_watermark() - log.log_end_offset()).max(0);
            (log.size_bytes(), lag)
        };
        let mut described = DescribeLogDirsPartition::default();
        described.partition_index = partition.index;
        described.partition_size = i64::try_from(size).unwrap_or(i64::MAX);
        described.offset_lag = lag;
        match result.topics.last_mut() {
            Some(topic) if topic.name.0.as_str() == partition.topic => {
                topic.partitions.push(described)
            }
            _ => {
                let mut topic = DescribeLogDirsTopic::default();
                topic.name = TopicName(str_bytes(partition.topic.clone()));
                topic.partitions.push(described);
                result.topics.push(topic);
            }
        }
    }
    let mut response = DescribeLogDirsResponse::default();
    response.results.push(result);
    response
}
