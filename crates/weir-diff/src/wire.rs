//! One raw connection to one broker: a request at an exact version, its answer or the news
//! that the broker closed the connection instead, each within a deadline.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_proto::{decode_response, encode_request, response_correlation_id};

/// Longest wait for one answer (a JoinGroup may wait out the group's initial rebalance delay).
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(20);
/// Largest answer accepted from either broker.
const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What a broker did with one request.
pub enum Outcome<Resp> {
    /// It answered.
    Answer(Resp),
    /// It closed the connection without answering.
    Closed,
}

/// A connection that is opened on first use and again after the broker closed it.
pub struct Wire {
    addr: String,
    stream: Option<TcpStream>,
    correlation_id: i32,
}

impl Wire {
    /// A wire to `addr` (HOST:PORT); nothing is connected yet.
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_string(),
            stream: None,
            correlation_id: 0,
        }
    }

    async fn stream(&mut self) -> Result<&mut TcpStream> {
        if self.stream.is_none() {
            let stream = tokio::time::timeout(ANSWER_DEADLINE, TcpStream::connect(&self.addr))
                .await
                .with_context(|| format!("connecting to {}: timed out", self.addr))?
                .with_context(|| format!("connecting to {}", self.addr))?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
        }
        Ok(self.stream.as_mut().expect("connected above"))
    }

    /// Sends `request` as `key` at `version` and reads the answer.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Outcome<Resp>> {
        let correlation_id = self.send(key, version, request).await?;
        let stream = self.stream().await?;
        let frame = match tokio::time::timeout(ANSWER_DEADLINE, read_frame(stream)).await {
            Err(_) => bail!("{key:?} v{version}: no answer within {ANSWER_DEADLINE:?}"),
            Ok(frame) => frame,
        };
        let Some(frame) = frame else {
            self.stream = None;
            return Ok(Outcome::Closed);
        };
        if response_correlation_id(&frame) != Some(correlation_id) {
            bail!("{key:?} v{version}: answer with another correlation id");
        }
        let response = decode_response(key, version, frame)
            .with_context(|| format!("decoding the {key:?} v{version} answer"))?;
        Ok(Outcome::Answer(response))
    }

    /// Sends `request` without reading an answer (a request that gets none, like acks=0).
    pub async fn send<Req: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<i32> {
        self.correlation_id += 1;
        let correlation_id = self.correlation_id;
        let frame = encode_request(key, version, correlation_id, "weir-diff", request)
            .with_context(|| format!("encoding {key:?} v{version}"))?;
        let stream = self.stream().await?;
        stream.write_all(&frame).await?;
        Ok(correlation_id)
    }

    /// True when the broker closes the connection within `within` (reading and dropping
    /// anything it sends meanwhile).
    pub async fn closed_within(&mut self, within: Duration) -> Result<bool> {
        let stream = self.stream().await?;
        let deadline = tokio::time::Instant::now() + within;
        let mut sink = [0u8; 4096];
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
                Err(_) => return Ok(false),
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.stream = None;
                    return Ok(true);
                }
                Ok(Ok(_)) => {}
            }
        }
    }
}

/// One length-prefixed frame, or `None` when the connection closed first.
async fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let length = stream.read_i32().await.ok()?;
    let length = usize::try_from(length)
        .ok()
        .filter(|l| *l <= ANSWER_BYTES_MAX)?;
    let mut frame = vec![0u8; length];
    stream.read_exact(&mut frame).await.ok()?;
    Some(Bytes::from(frame))
}
