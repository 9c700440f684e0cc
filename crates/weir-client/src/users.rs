//! SCRAM users through Kafka's admin API: AlterUserScramCredentials (the salt is made here
//! and only the salted password leaves the client) and DescribeUserScramCredentials.

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use weir_sasl::ScramHash;

use crate::admin::{check, Admin};
use crate::error::{ClientError, Result};

/// A user and the SCRAM mechanisms it has credentials for, with their iterations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    /// The user name.
    pub name: String,
    /// Each mechanism's hash and PBKDF2 iterations.
    pub credentials: Vec<(ScramHash, i32)>,
}

impl Admin {
    /// Sets `user`'s password for each of `hashes` (creating the user, or replacing its
    /// credential of that mechanism), each with `iterations`.
    pub async fn set_scram_password(
        &self,
        user: &str,
        password: &str,
        hashes: &[ScramHash],
        iterations: u32,
    ) -> Result<()> {
        let mut request = AlterUserScramCredentialsRequest::default();
        for hash in hashes {
            let salt = weir_sasl::random_salt();
            let mut upsertion = ScramCredentialUpsertion::default();
            upsertion.name = StrBytes::from_string(user.to_string());
            upsertion.mechanism = hash.code();
            upsertion.iterations = iterations as i32;
            upsertion.salted_password = hash
                .salted_password(password.as_bytes(), &salt, iterations)
                .into();
            upsertion.salt = salt.into();
            request.upsertions.push(upsertion);
        }
        self.alter_scram(request).await
    }

    /// Removes `user`'s credentials of `hashes`.
    pub async fn delete_scram_credentials(&self, user: &str, hashes: &[ScramHash]) -> Result<()> {
        let mut request = AlterUserScramCredentialsRequest::default();
        for hash in hashes {
            let mut deletion = ScramCredentialDeletion::default();
            deletion.name = StrBytes::from_string(user.to_string());
            deletion.mechanism = hash.code();
            request.deletions.push(deletion);
        }
        self.alter_scram(request).await
    }

    async fn alter_scram(&self, request: AlterUserScramCredentialsRequest) -> Result<()> {
        let connection = self.cluster().controller().await?;
        let response: AlterUserScramCredentialsResponse = connection
            .call(ApiKey::AlterUserScramCredentials, 0, &request)
            .await?;
        for result in &response.results {
            check(result.error_code, result.error_message.as_ref())?;
        }
        Ok(())
    }

    /// The users with SCRAM credentials: those named, or every one.
    pub async fn describe_scram_users(&self, users: Option<&[String]>) -> Result<Vec<ScramUser>> {
        let mut request = DescribeUserScramCredentialsRequest::default();
        request.users = users.map(|names| {
            names
                .iter()
                .map(|name| {
                    let mut user = UserName::default();
                    user.name = StrBytes::from_string(name.clone());
                    user
                })
                .collect()
        });
        let connection = self.cluster().controller().await?;
        let response: DescribeUserScramCredentialsResponse = connection
            .call(ApiKey::DescribeUserScramCredentials, 0, &request)
            .await?;
        check(response.error_code, response.error_message.as_ref())?;
        let mut found = Vec::new();
        for result in response.results {
            check(result.error_code, result.error_message.as_ref())?;
            let credentials = result
                .credential_infos
                .iter()
                .map(|info| {
                    ScramHash::from_code(info.mechanism)
                        .map(|hash| (hash, info.iterations))
                        .ok_or_else(|| {
                            ClientError::Protocol(format!(
                                "unknown SCRAM mechanism {}",
                                info.mechanism
                            ))
                        })
                })
                .collect::<Result<_>>()?;
            found.push(ScramUser {
                name: result.user.to_string(),
                credentials,
            });
        }
        Ok(found)
    }
}
