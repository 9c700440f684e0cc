//! `weir user create|list|delete`: SCRAM users, through Kafka's AlterUserScramCredentials and
//! DescribeUserScramCredentials (the password is salted and hashed here; only the salted
//! password travels).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use weir_client::{Admin, ScramHash};

use super::{within, ConnectArgs};

/// SCRAM users (SASL logins).
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    weir user create alice --password-file alice.pw\n  \
    WEIR_USER_PASSWORD=s3cret weir user create bob --mechanism scram-sha-512\n  \
    weir user list\n  \
    weir user delete alice")]
pub struct UserArgs {
    #[command(subcommand)]
    command: UserCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// A SCRAM mechanism on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MechanismArg {
    /// SCRAM-SHA-256.
    #[value(name = "scram-sha-256")]
    ScramSha256,
    /// SCRAM-SHA-512.
    #[value(name = "scram-sha-512")]
    ScramSha512,
}

impl MechanismArg {
    fn hash(self) -> ScramHash {
        match self {
            MechanismArg::ScramSha256 => ScramHash::Sha256,
            MechanismArg::ScramSha512 => ScramHash::Sha512,
        }
    }
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Create a user, or set an existing user's password, for each mechanism given (both by
    /// default). The password comes from --password-file, or WEIR_USER_PASSWORD.
    Create {
        /// The user name.
        name: String,
        /// A file whose first line is the password.
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// The password (kept out of the process list when given through the environment).
        #[arg(long = "password", env = "WEIR_USER_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// The mechanisms to set the password for.
        #[arg(long, value_enum, ignore_case = true, value_delimiter = ',', default_values_t = [MechanismArg::ScramSha256, MechanismArg::ScramSha512])]
        mechanism: Vec<MechanismArg>,
        /// PBKDF2 iterations, 4096 to 16384.
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
    },
    /// List the users with SCRAM credentials, with their mechanisms and iterations.
    List,
    /// Delete a user's credentials: of the mechanisms given, or all of them.
    Delete {
        /// The user name.
        name: String,
        /// The mechanisms to remove (all the user has by default).
        #[arg(long, value_enum, ignore_case = true, value_delimiter = ',')]
        mechanism: Vec<MechanismArg>,
    },
}

fn read_password(file: Option<PathBuf>, given: Option<String>) -> anyhow::Result<String> {
    let password = match (file, given) {
        (Some(path), _) => std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        (None, Some(password)) => password,
        (None, None) => bail!("give the password with --password-file FILE or WEIR_USER_PASSWORD"),
    };
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password)
}

/// Runs a user command.
pub async fn run(args: UserArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.connect.client_config());
    match args.command {
        UserCommand::Create {
            name,
            password_file,
            password,
            mechanism,
            iterations,
        } => {
            let password = read_password(password_file, password)?;
            let hashes: Vec<ScramHash> = mechanism.iter().map(|m| m.hash()).collect();
            within(
                &args.connect,
                admin.set_scram_password(&name, &password, &hashes, iterations),
            )
            .await?;
            let names: Vec<&str> = hashes.iter().map(|h| h.mechanism().name()).collect();
            outln!("user {name}: password set for {}", names.join(", "));
        }
        UserCommand::List => {
            let users = within(&args.connect, admin.describe_scram_users(None)).await?;
            outln!("{:<32} MECHANISMS", "USER");
            for user in users {
                let credentials: Vec<String> = user
                    .credentials
                    .iter()
                    .map(|(hash, iterations)| {
                        format!("{} ({iterations} iterations)", hash.mechanism().name())
                    })
                    .collect();
                outln!("{:<32} {}", user.name, credentials.join(", "));
            }
        }
        UserCommand::Delete { name, mechanism } => {
            let hashes: Vec<ScramHash> = match mechanism.is_empty() {
                false => mechanism.iter().map(|m| m.hash()).collect(),
                true => {
                    let found = within(
                        &args.connect,
                        admin.describe_scram_users(Some(std::slice::from_ref(&name))),
                    )
                    .await?;
                    found
                        .iter()
                        .flat_map(|u| u.credentials.iter().map(|(hash, _)| *hash))
                        .collect()
                }
            };
            within(
                &args.connect,
                admin.delete_scram_credentials(&name, &hashes),
            )
            .await?;
            outln!("user {name}: deleted");
        }
    }
    Ok(())
}
