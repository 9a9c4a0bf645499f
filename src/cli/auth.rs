//! `fairway auth`: credentials for the server's configuration.

use clap::{Args, Subcommand, ValueEnum};

use fairway::security::{Grant, Role, api_key_hash, new_api_key};

#[derive(Subcommand, Debug)]
pub(super) enum AuthCommand {
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
}

#[derive(Subcommand, Debug)]
pub(super) enum KeyCommand {
    /// Make a new API key: prints the key once, and the principal to add to
    /// the server's config, which holds only the key's hash.
    Create(CreateArgs),
}

#[derive(Args, Debug)]
pub(super) struct CreateArgs {
    /// The principal's name, as logs and errors give it.
    #[arg(long)]
    name: String,
    /// A role to grant on `--queues`.
    #[arg(long, value_enum)]
    role: Option<RoleArg>,
    /// The queue names or prefixes (`jobs.*`) the role is granted on.
    #[arg(long, num_args = 1.., requires = "role")]
    queues: Vec<String>,
    /// With role producer: the prefix the fairness keys of its adds must have.
    #[arg(long, requires = "role")]
    fairness_prefix: Option<String>,
    /// With --fairness-prefix: the highest priority (1 highest to 5) its adds
    /// may carry (3, the default priority, unless given).
    #[arg(long, requires = "fairness_prefix")]
    highest_priority: Option<u32>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RoleArg {
    Admin,
    Producer,
    Worker,
    Reader,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::Admin => Role::Admin,
            RoleArg::Producer => Role::Producer,
            RoleArg::Worker => Role::Worker,
            RoleArg::Reader => Role::Reader,
        }
    }
}

pub(super) fn run(command: AuthCommand) -> anyhow::Result<()> {
    let AuthCommand::Key(KeyCommand::Create(args)) = command;
    let grant = args.role.map(|role| Grant {
        role: role.into(),
        queues: if args.queues.is_empty() { vec!["*".to_owned()] } else { args.queues.clone() },
        fairness_prefix: args.fairness_prefix.clone(),
        highest_priority: args.highest_priority,
    });
    if let Some(grant) = &grant {
        grant.validate("the grant").map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let key = new_api_key();
    println!("# The API key of {:?}, shown this once: keep it as a secret (FAIRWAY_TOKEN, --token).", args.name);
    println!("{key}");
    println!();
    println!("# Add to the server's config (it holds the key's SHA-256 only):");
    println!("[[security.principals]]");
    println!("name = {}", toml_string(&args.name));
    println!("api_key_sha256 = [\"{}\"]", api_key_hash(&key));
    match grant {
        Some(grant) => {
            let queues: Vec<String> = grant.queues.iter().map(|q| toml_string(q)).collect();
            let prefix = grant.fairness_prefix.as_deref().map(|p| format!(", fairness_prefix = {}", toml_string(p)));
            let highest = grant.highest_priority.map(|h| format!(", highest_priority = {h}"));
            let role = format!("{:?}", grant.role).to_lowercase();
            println!(
                "grants = [{{ role = \"{role}\", queues = [{}]{}{} }}]",
                queues.join(", "),
                prefix.unwrap_or_default(),
                highest.unwrap_or_default()
            );
        }
        None => println!("grants = []  # e.g. {{ role = \"worker\", queues = [\"jobs.*\"] }}"),
    }
    Ok(())
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}
