//! `weir metadata query`: one read-only SQL statement against the relational metadata a
//! controller keeps (see `relational.rs` for the tables), bounded in time and rows.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

/// The database file a controller keeps in its metadata directory.
pub const DATABASE_FILE: &str = "metadata.db";

/// What a query returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows, each value as text (`NULL` for null, hex for blobs).
    pub rows: Vec<Vec<String>>,
    /// True when rows beyond the limit were left out.
    pub truncated: bool,
}

/// Runs `sql` (exactly one statement, which must only read) against the database at `path`,
/// opened read-only. It is interrupted after `timeout`, and at most `max_rows` rows are kept.
pub fn run_query(
    path: &Path,
    sql: &str,
    timeout: Duration,
    max_rows: usize,
) -> Result<QueryResult, String> {
    if !path.is_file() {
        return Err(format!(
            "no metadata database at {}: `weir server` creates it in DATA_DIR/metadata",
            path.display()
        ));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    conn.busy_timeout(timeout).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    conn.progress_handler(1_000, Some(move || Instant::now() > deadline))
        .map_err(|e| e.to_string())?;
    let mut statement = conn.prepare(sql).map_err(|e| match e {
        rusqlite::Error::MultipleStatement => "give one SQL statement only".to_string(),
        other => other.to_string(),
    })?;
    if !statement.readonly() {
        return Err("only statements that read are allowed (SELECT, WITH …)".into());
    }
    let columns: Vec<String> = statement.column_names().map(str::to_string).collect();
    let mut rows = Vec::new();
    let mut truncated = false;
    let mut cursor = statement.query([]).map_err(|e| e.to_string())?;
    while let Some(row) = cursor.next().map_err(|e| interrupted(e, timeout))? {
        if rows.len() == max_rows {
            truncated = true;
            break;
        }
        let values = (0..columns.len())
            .map(|i| row.get_ref(i).map(text))
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| e.to_string())?;
        rows.push(values);
    }
    Ok(QueryResult {
        columns,
        rows,
        truncated,
    })
}

/// A query error, saying so when the deadline interrupted it.
fn interrupted(error: rusqlite::Error, timeout: Duration) -> String {
    match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::OperationInterrupted) => {
            format!(
                "the query ran longer than {} s and was stopped",
                timeout.as_secs_f64()
            )
        }
        _ => error.to_string(),
    }
}

fn text(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) => b.iter().map(|byte| format!("{byte:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use weir_metadata::{BrokerListener, ConfigChange, NewTopic};

    use super::*;
    use crate::controller::tests::{open_node, Node};

    async fn controller(dir: &Path) -> Node {
        let node = open_node(dir, 1).await;
        node.quorum()
            .keep_relational(&dir.join(DATABASE_FILE))
            .expect("relational");
        for node_id in 1..=3 {
            let listener = BrokerListener {
                name: "PLAINTEXT".into(),
                host: format!("broker-{node_id}"),
                port: 9092,
            };
            node.join(node_id, listener, None).await;
        }
        node
    }

    fn query(dir: &Path, sql: &str) -> Result<QueryResult, String> {
        run_query(&dir.join(DATABASE_FILE), sql, Duration::from_secs(5), 100)
    }

    fn topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 2,
            configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
            assignments: Vec::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_tables_follow_every_command_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = controller(dir.path()).await;
        c.create_topic(topic("orders", 3), false, None)
            .await
            .expect("create");
        c.create_topic(topic("gone", 1), false, None)
            .await
            .expect("create");
        c.create_partitions("orders", 5, None, (false, None))
            .await
            .expect("grow");
        c.delete_topic("gone", None).await.expect("delete");
        let set = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        c.alter_topic_config("orders", ConfigChange::setting(set), false)
            .await
            .expect("alter");
        let retention = BTreeMap::from([("log.retention.ms".to_string(), "7000".to_string())]);
        c.alter_broker_config(None, ConfigChange::setting(retention), false)
            .await
            .expect("broker");
        let sql = "SELECT t.name, count(DISTINCT p.partition_index), group_concat(DISTINCT c.name)
                   FROM topics t JOIN partitions p USING (topic_id)
                   LEFT JOIN topic_configs c USING (topic_id) GROUP BY t.name";
        let expected = vec![vec![
            "orders".to_string(),
            "5".to_string(),
            "cleanup.policy,retention.ms".to_string(),
        ]];
        assert_eq!(query(dir.path(), sql).expect("query").rows, expected);
        let leaders = "SELECT p.partition_index, l.host, count(r.node_id), sum(r.in_sync)
                       FROM partitions p JOIN topics t USING (topic_id)
                       JOIN broker_listeners l ON l.node_id = p.leader
                       JOIN replicas r USING (topic_id, partition_index)
                       WHERE t.name = 'orders' GROUP BY p.partition_index ORDER BY p.partition_index";
        let rows = query(dir.path(), leaders).expect("query").rows;
        assert_eq!(rows.len(), 5, "{rows:?}");
        for row in &rows {
            assert!(row[1].starts_with("broker-"), "{row:?}");
            // Two replicas, both in sync.
            assert_eq!((row[2].as_str(), row[3].as_str()), ("2", "2"), "{row:?}");
        }
        // Broker 3 shuts down: it leaves every ISR, and its partitions are under-replicated.
        let epoch = c.image().broker(3).expect("broker 3").epoch;
        c.controlled_shutdown(3, epoch).await.expect("shutdown");
        let on_three = c
            .image()
            .topic("orders")
            .expect("orders")
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&3))
            .count();
        assert!(on_three > 0);
        let under_replicated = "SELECT t.name, p.partition_index FROM partitions p
                                JOIN topics t USING (topic_id)
                                WHERE EXISTS (SELECT 1 FROM replicas r WHERE r.topic_id = p.topic_id
                                    AND r.partition_index = p.partition_index AND NOT r.in_sync)";
        let rows = query(dir.path(), under_replicated).expect("query").rows;
        assert_eq!(rows.len(), on_three, "the partitions on broker 3: {rows:?}");
        let cluster = "SELECT name, value, node_id FROM broker_configs";
        let row: Vec<String> = vec!["log.retention.ms".into(), "7000".into(), "NULL".into()];
        assert_eq!(query(dir.path(), cluster).expect("query").rows, vec![row]);
        c.stop().await;
        // Tables deleted behind the controller's back are rebuilt from the log.
        std::fs::remove_file(dir.path().join(DATABASE_FILE)).expect("remove");
        let c = controller(dir.path()).await;
        assert_eq!(query(dir.path(), sql).expect("query").rows, expected);
        c.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_one_reading_statement_within_its_limits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = controller(dir.path()).await;
        for i in 0..3 {
            c.create_topic(topic(&format!("t{i}"), 1), false, None)
                .await
                .expect("create");
        }
        for refused in [
            "DELETE FROM topics",
            "UPDATE meta SET applied_count = 0",
            "SELECT 1; SELECT 2",
            "no such thing",
        ] {
            assert!(query(dir.path(), refused).is_err(), "{refused}");
        }
        let limited = run_query(
            &dir.path().join(DATABASE_FILE),
            "SELECT name FROM topics ORDER BY name",
            Duration::from_secs(5),
            2,
        )
        .expect("query");
        assert_eq!((limited.rows.len(), limited.truncated), (2, true));
        let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n";
        let stopped = run_query(
            &dir.path().join(DATABASE_FILE),
            endless,
            Duration::from_millis(200),
            10,
        );
        assert!(stopped.expect_err("interrupted").contains("stopped"));
        assert_eq!(
            query(dir.path(), "SELECT count(*) FROM topics")
                .expect("query")
                .rows,
            vec![vec!["3".to_string()]],
            "nothing changed"
        );
    }
}
