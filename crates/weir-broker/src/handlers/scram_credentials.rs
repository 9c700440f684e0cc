//! SCRAM credentials as Kafka's admin API manages them: AlterUserScramCredentials (51, v0)
//! turns each salted password a client sends into the stored and server keys and commits them
//! to the metadata (never the password, never the salted password), and
//! DescribeUserScramCredentials (50, v0) lists each user's mechanisms and iterations. Each user
//! is answered alone, as in Kafka: a user with any bad alteration has none of them applied.
//! Also the credentials `weir server --add-scram` asks for at startup.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::requests::AlterScramCredentials;
use weir_metadata::{ControllerError, ScramDeletion, ScramUpsert};
use weir_sasl::{check_iterations, ScramCredential, ScramHash};

use crate::broker::Broker;
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::str_bytes;

/// Why one user's alterations are refused: Kafka's code and message.
type Refusal = (ResponseError, String);

/// A user's alterations, checked.
#[derive(Default)]
struct UserChanges {
    upserts: Vec<ScramUpsert>,
    deletions: Vec<ScramDeletion>,
    refusal: Option<Refusal>,
}

fn mechanism(code: i8) -> Result<ScramHash, Refusal> {
    ScramHash::from_code(code).ok_or((
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism".to_string(),
    ))
}

fn check_upsert(
    upsertion: &kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion,
) -> Result<ScramUpsert, Refusal> {
    let hash = mechanism(upsertion.mechanism)?;
    let unacceptable = |message: String| (ResponseError::UnacceptableCredential, message);
    let iterations = check_iterations(hash, upsertion.iterations).map_err(|e| unacceptable(e.0))?;
    if upsertion.salt.is_empty() {
        return Err(unacceptable("Salt must not be empty".into()));
    }
    if upsertion.salted_password.len() != hash.output_len() {
        return Err(unacceptable(format!(
            "The salted password of {} must be {} bytes",
            hash.mechanism().name(),
            hash.output_len()
        )));
    }
    Ok(ScramUpsert {
        user: upsertion.name.to_string(),
        hash,
        credential: ScramCredential::from_salted_password(
            hash,
            upsertion.salt.to_vec(),
            &upsertion.salted_password,
            iterations,
        ),
    })
}

/// AlterUserScramCredentials: one result per user named.
pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterUserScramCredentialsRequest,
    access: &Access,
) -> AlterUserScramCredentialsResponse {
    // ALTER on the cluster, or each user named is refused.
    if !access.cluster(AclOperation::Alter) {
        let users: BTreeSet<String> = request
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(request.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let mut response = AlterUserScramCredentialsResponse::default();
        response.results = users
            .into_iter()
            .map(|user| {
                let mut result = AlterUserScramCredentialsResult::default();
                result.user = str_bytes(user);
                result.error_code = ResponseError::ClusterAuthorizationFailed.code();
                result.error_message = Some(str_bytes(CLUSTER_DENIED));
                result
            })
            .collect();
        return response;
    }
    let mut users: BTreeMap<String, UserChanges> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let named = request
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism, None))
        .chain(
            request
                .upsertions
                .iter()
                .map(|u| (u.name.to_string(), u.mechanism, Some(u))),
        );
    for (user, code, upsertion) in named {
        let changes = users.entry(user.clone()).or_default();
        if changes.refusal.is_some() {
            continue;
        }
        let checked = if user.is_empty() {
            Err((
                ResponseError::UnacceptableCredential,
                "Username must not be empty".into(),
            ))
        } else if !seen.insert((user.clone(), code)) {
            Err((
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".into(),
            ))
        } else {
            match upsertion {
                Some(upsertion) => check_upsert(upsertion).map(|u| changes.upserts.push(u)),
                None => mechanism(code).map(|hash| {
                    changes.deletions.push(ScramDeletion {
                        user: user.clone(),
                        hash,
                    })
                }),
            }
        };
        if let Err(refusal) = checked {
            changes.refusal = Some(refusal);
        }
    }
    let (upserts, deletions) = users.values().filter(|c| c.refusal.is_none()).fold(
        (Vec::new(), Vec::new()),
        |(mut u, mut d), c| {
            u.extend(c.upserts.iter().cloned());
            d.extend(c.deletions.iter().cloned());
            (u, d)
        },
    );
    let committed = match upserts.is_empty() && deletions.is_empty() {
        true => Ok(Vec::new()),
        false => {
            let pending = broker
                .controller
                .ask(AlterScramCredentials { upserts, deletions });
            broker.change_metadata(pending).await
        }
    };
    let mut response = AlterUserScramCredentialsResponse::default();
    for (user, changes) in users {
        let refusal = changes.refusal.or_else(|| match &committed {
            Err(error) => {
                let error = ErrorReply::from(error);
                Some((error.error, error.message))
            }
            Ok(missing) => missing.iter().any(|m| m.user == user).then(|| {
                (
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".to_string(),
                )
            }),
        });
        let mut result = AlterUserScramCredentialsResult::default();
        result.user = str_bytes(user);
        if let Some((error, message)) = refusal {
            result.error_code = error.code();
            result.error_message = Some(str_bytes(message));
        }
        response.results.push(result);
    }
    response
}

/// DescribeUserScramCredentials: the named users (every user with credentials without names).
pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeUserScramCredentialsRequest,
    access: &Access,
) -> DescribeUserScramCredentialsResponse {
    let image = broker.image();
    let mut response = DescribeUserScramCredentialsResponse::default();
    if !access.cluster(AclOperation::Describe) {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        response.error_message = Some(str_bytes(CLUSTER_DENIED));
        return response;
    }
    let describe_user = |user: &str| {
        let mut result = DescribeUserScramCredentialsResult::default();
        result.user = str_bytes(user);
        match image.scram_credentials_of(user) {
            Some(credentials) => {
                result.credential_infos = credentials
                    .iter()
                    .map(|(hash, credential)| {
                        let mut info = CredentialInfo::default();
                        info.mechanism = hash.code();
                        info.iterations = credential.iterations as i32;
                        info
                    })
                    .collect();
            }
            None => {
                result.error_code = ResponseError::ResourceNotFound.code();
                result.error_message = Some(str_bytes(
                    "Attempt to describe a user credential that does not exist",
                ));
            }
        }
        result
    };
    match request.users.filter(|users| !users.is_empty()) {
        None => {
            response.results = image
                .scram_users()
                .map(|(user, _)| describe_user(user))
                .collect();
        }
        Some(users) => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for user in &users {
                *counts.entry(user.name.to_string()).or_default() += 1;
            }
            for (user, count) in counts {
                let result = match count {
                    1 => describe_user(&user),
                    _ => {
                        let mut result = DescribeUserScramCredentialsResult::default();
                        result.user = str_bytes(user);
                        result.error_code = ResponseError::DuplicateResource.code();
                        result.error_message = Some(str_bytes(
                            "Cannot describe SCRAM credentials for the same user twice in a single request",
                        ));
                        result
                    }
                };
                response.results.push(result);
            }
        }
    }
    response
}

/// Gives each `(user, mechanism, password, iterations)` a credential unless the user already
/// has one of that mechanism (`weir server --add-scram`: the first start creates it, later
/// starts keep what the cluster holds, changed or not).
pub async fn add_missing(
    broker: &Arc<Broker>,
    wanted: Vec<(String, ScramHash, String, u32)>,
) -> Result<Vec<String>, ControllerError> {
    let image = broker.image();
    let upserts: Vec<ScramUpsert> = wanted
        .into_iter()
        .filter(|(user, hash, _, _)| image.scram_credential(user, *hash).is_none())
        .map(|(user, hash, password, iterations)| ScramUpsert {
            credential: ScramCredential::new(hash, &password, iterations),
            user,
            hash,
        })
        .collect();
    let added = upserts
        .iter()
        .map(|u| format!("{} ({})", u.user, u.hash.mechanism().name()))
        .collect();
    if !upserts.is_empty() {
        let pending = broker.controller.ask(AlterScramCredentials {
            upserts,
            deletions: Vec::new(),
        });
        broker.change_metadata(pending).await?;
    }
    Ok(added)
}
