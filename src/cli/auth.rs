//! `fairway auth`: credentials for the server's configuration, and the
//! rotation of the cluster's secret (which works on the store directly).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use fairway::clock::{Clock, SystemClock};
use fairway::config::Config;
use fairway::security::{Grant, Role, SIGNING_SWITCH_DELAY, api_key_hash, new_api_key};
use fairway::server::rotation::{self, MAX_OVERLAP, MIN_OVERLAP, utc_date as date};

#[derive(Subcommand, Debug)]
pub(super) enum AuthCommand {
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Rotate the cluster's secret (the keys of lease tokens and node
    /// proofs): nodes pick the new one up within 10 s, sign with it 30 s
    /// after the rotation, and accept what the old one made until the end of
    /// --overlap. Works on the store: with the embedded store, run it while
    /// the node is stopped (one process holds the data directory).
    Rotate(RotateArgs),
}

#[derive(Args, Debug)]
pub(super) struct RotateArgs {
    /// How long what the old secret made (lease tokens, node proofs) stays
    /// accepted, from now: more than 30 s plus the longest time a worker
    /// holds one lease token. 1m to 7d, e.g. 10m.
    #[arg(long, value_parser = parse_overlap)]
    overlap: Duration,
    /// The servers' TOML config file (for the store and its settings).
    #[arg(long, env = "FAIRWAY_CONFIG")]
    config: Option<PathBuf>,
    /// `embedded:DIR` or `cassandra://HOST:PORT/KEYSPACE`; else the config's.
    #[arg(long)]
    store: Option<String>,
}

/// `--overlap`: a duration (`10m`) within the bounds of a rotation.
fn parse_overlap(text: &str) -> Result<Duration, String> {
    let overlap = fairway::clock::duration_serde::parse(text)?;
    if !(MIN_OVERLAP..=MAX_OVERLAP).contains(&overlap) {
        return Err(format!("{text:?} must be at least 1m ({MIN_OVERLAP:?}) and at most 7d ({MAX_OVERLAP:?})"));
    }
    Ok(overlap)
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

pub(super) async fn run(command: AuthCommand) -> anyhow::Result<()> {
    match command {
        AuthCommand::Key(KeyCommand::Create(args)) => create_key(args),
        AuthCommand::Rotate(args) => rotate(args).await,
    }
}

async fn rotate(args: RotateArgs) -> anyhow::Result<()> {
    let flags: Vec<(&str, String)> = args.store.into_iter().map(|store| ("store", store)).collect();
    let config = Config::load(args.config.as_deref(), std::env::vars(), &flags)?;
    let store_url = config.store_url()?;
    let stores = fairway::server::open_store(&store_url, &config).await?;
    let rotated = rotation::rotate(stores.tasks.as_ref(), args.overlap, SystemClock.now_ms()).await;
    let closed = stores.tasks.close().await;
    let rotation = rotated?;
    closed?;
    println!("The cluster's secret of {store_url} was rotated at {}.", date(rotation.rotated_at_ms));
    println!(
        "Nodes read it within {:?}, sign with the new secret from {} ({SIGNING_SWITCH_DELAY:?} after the rotation),",
        fairway::security::SECRET_RELOAD_INTERVAL,
        date(rotation.signs_until_ms)
    );
    println!(
        "and accept lease tokens and node proofs made with the old one until {} (--overlap {}): a worker holding a \
         token of the old secret after then is refused (INVALID_ARGUMENT) and its task is delivered again when its \
         lease runs out.",
        date(rotation.accepted_until_ms),
        fairway::clock::duration_serde::format(args.overlap)
    );
    Ok(())
}

fn create_key(args: CreateArgs) -> anyhow::Result<()> {
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
