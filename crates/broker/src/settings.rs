//! The broker's settings from flags, environment and a `server.properties`-style file.
//!
//! Precedence, lowest first: built-in defaults, `--config FILE`, `MILLRACE_*` environment
//! variables, `--set name=value` flags, then the dedicated flags (`--node-id`, `--data-dir`,
//! `--listen`, `--advertised-listener`). Every key uses Kafka's name and is validated by
//! `millrace_cluster::config`; an unknown key or bad value stops the broker with exit code 2 and
//! one line naming the key.
//!
//! Environment: `MILLRACE_NUM_PARTITIONS=3` sets `num.partitions` (upper case, dots as
//! underscores). `MILLRACE_NODE_ID`, `MILLRACE_DATA_DIR`, `MILLRACE_LISTEN`,
//! `MILLRACE_ADVERTISED_LISTENER` and `MILLRACE_CONFIG` are the flags' own variables;
//! `MILLRACE_LOG` (log filter) and the test scripts' `MILLRACE_BIN`, `MILLRACE_START_TIMEOUT`,
//! `MILLRACE_BUILD_TIMEOUT` and `MILLRACE_KEEP_WORK` are not config keys.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use millrace_cluster::config::{validate_value, ConfigType};
use millrace_cluster::{BrokerConfig, ConfigError};

/// Default Kafka listener.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9092";
/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Environment variables with the `MILLRACE_` prefix that are not broker config keys.
const NON_CONFIG_ENV: &[&str] = &[
    "NODE_ID",
    "DATA_DIR",
    "LISTEN",
    "ADVERTISED_LISTENER",
    "CONFIG",
    "LOG",
    "BIN",
    "START_TIMEOUT",
    "BUILD_TIMEOUT",
    "KEEP_WORK",
];

/// Millrace: a Kafka-wire-compatible broker. With no arguments, a single-node broker on
/// 127.0.0.1:9092 with its data in ./data.
#[derive(Debug, Parser)]
#[command(name = "millrace", version)]
pub struct Cli {
    /// This broker's id (Kafka's node.id).
    #[arg(long, env = "MILLRACE_NODE_ID")]
    pub node_id: Option<i32>,
    /// Directory holding the partition logs and metadata (default ./data).
    #[arg(long, env = "MILLRACE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address of the Kafka listener (host:port; port 0 picks a free port).
    #[arg(long, env = "MILLRACE_LISTEN")]
    pub listen: Option<String>,
    /// host:port that clients are told to connect to (default: the listener's address).
    #[arg(long, env = "MILLRACE_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// A broker config under Kafka's name, e.g. --set num.partitions=3 (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// A server.properties-style file of broker configs.
    #[arg(long, env = "MILLRACE_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Everything the broker needs to start.
#[derive(Debug)]
pub struct Settings {
    pub config: BrokerConfig,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `None` = advertise the bound address.
    pub advertised: Option<(String, u16)>,
}

/// A settings problem: always names the key or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("invalid value '{value}' for {what}: {reason}")]
    Invalid {
        what: String,
        value: String,
        reason: String,
    },
    #[error("cannot read config file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn invalid(what: &str, value: &str, reason: &str) -> SettingsError {
    SettingsError::Invalid {
        what: what.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Parses `key=value` lines; `#` and `!` start comments.
pub fn parse_properties(
    text: &str,
    origin: &str,
) -> Result<BTreeMap<String, String>, SettingsError> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| {
                invalid(
                    &format!("{origin} line {}", n + 1),
                    line,
                    "expected name=value",
                )
            })?;
        out.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(out)
}

fn env_layer(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.filter_map(|(name, value)| {
        let rest = name.strip_prefix("MILLRACE_")?;
        if NON_CONFIG_ENV.contains(&rest) {
            return None;
        }
        Some((rest.to_ascii_lowercase().replace('_', "."), value))
    })
    .collect()
}

/// `PLAINTEXT://host:port` or plain `host:port`: one listener of a served security protocol.
/// A list of several is refused rather than served in part, as is `SSL://` and the like.
fn parse_host_port(what: &str, value: &str) -> Result<(String, u16), SettingsError> {
    validate_value(what, value, ConfigType::Listeners)?;
    let mut listeners = value.split(',').map(str::trim).filter(|l| !l.is_empty());
    let first = listeners.next().unwrap_or_default();
    if listeners.next().is_some() {
        return Err(invalid(
            what,
            value,
            "Millrace serves one listener; give a single host:port",
        ));
    }
    let bare = first.split_once("://").map_or(first, |(_, rest)| rest);
    let (host, port) = bare
        .rsplit_once(':')
        .ok_or_else(|| invalid(what, value, "expected host:port"))?;
    let port: u16 = port.parse().map_err(|_| invalid(what, value, "bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok((host.to_string(), port))
}

impl Settings {
    /// Builds the settings from parsed flags and the process environment.
    pub fn resolve(
        cli: &Cli,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Self, SettingsError> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| SettingsError::File {
                    path: path.clone(),
                    source,
                })?;
                parse_properties(&text, &path.display().to_string())?
            }
            None => BTreeMap::new(),
        };
        let env = env_layer(env);
        let mut sets = BTreeMap::new();
        for item in &cli.set {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| invalid("--set", item, "expected name=value"))?;
            sets.insert(k.trim().to_string(), v.trim().to_string());
        }
        let mut flags = BTreeMap::new();
        if let Some(id) = cli.node_id {
            flags.insert("node.id".to_string(), id.to_string());
        }
        let config = BrokerConfig::from_layers([&file, &env, &sets, &flags])?;

        let data_dir = cli
            .data_dir
            .clone()
            .or_else(|| config.log_dir().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let (listen_what, listen_text) = match &cli.listen {
            Some(l) => ("--listen", l.clone()),
            None => (
                "listeners",
                config
                    .explicit("listeners")
                    .unwrap_or(DEFAULT_LISTEN)
                    .to_string(),
            ),
        };
        let (host, port) = parse_host_port(listen_what, &listen_text)?;
        let listen: SocketAddr = format!("{host}:{port}")
            .parse()
            .or_else(|_| {
                std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or(())
            })
            .map_err(|_| {
                invalid(
                    listen_what,
                    &listen_text,
                    "not an address this host can bind",
                )
            })?;
        let advertised = match (
            &cli.advertised_listener,
            config.explicit("advertised.listeners"),
        ) {
            (Some(a), _) => Some(parse_host_port("--advertised-listener", a)?),
            (None, Some(a)) => Some(parse_host_port("advertised.listeners", a)?),
            (None, None) => None,
        };
        Ok(Self {
            config,
            data_dir,
            listen,
            advertised,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("millrace").chain(args.iter().copied()))
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults() {
        let s = Settings::resolve(&cli(&[]), std::iter::empty()).unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(s.config.node_id(), 1);
        assert!(s.advertised.is_none());
    }

    #[test]
    fn precedence_file_env_set_flag() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.properties");
        std::fs::write(
            &file,
            "# comment\nnum.partitions=2\nnode.id=7\nlisteners=PLAINTEXT://127.0.0.1:19092\n",
        )
        .unwrap();
        let c = cli(&[
            "--config",
            file.to_str().unwrap(),
            "--set",
            "num.partitions=4",
            "--node-id",
            "9",
        ]);
        let s = Settings::resolve(
            &c,
            env(&[("MILLRACE_NUM_PARTITIONS", "3"), ("MILLRACE_BIN", "x")]).into_iter(),
        )
        .unwrap();
        assert_eq!(s.config.num_partitions(), 4);
        assert_eq!(s.config.node_id(), 9);
        assert_eq!(s.listen.port(), 19092);
        let s = Settings::resolve(
            &cli(&["--config", file.to_str().unwrap()]),
            env(&[("MILLRACE_NUM_PARTITIONS", "3")]).into_iter(),
        )
        .unwrap();
        assert_eq!(s.config.num_partitions(), 3);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err =
            Settings::resolve(&cli(&["--set", "bogus.key=1"]), std::iter::empty()).unwrap_err();
        assert!(err.to_string().contains("bogus.key"), "{err}");
        let err = Settings::resolve(&cli(&[]), env(&[("MILLRACE_NO_SUCH", "1")]).into_iter())
            .unwrap_err();
        assert!(err.to_string().contains("no.such"), "{err}");
        let err = Settings::resolve(&cli(&["--set", "num.partitions=x"]), std::iter::empty())
            .unwrap_err();
        assert!(err.to_string().contains("num.partitions"), "{err}");
    }

    #[test]
    fn listeners() {
        assert_eq!(
            parse_host_port("x", "PLAINTEXT://h:1").unwrap(),
            ("h".to_string(), 1)
        );
        assert_eq!(
            parse_host_port("x", ":9092").unwrap(),
            ("0.0.0.0".to_string(), 9092)
        );
        assert!(parse_host_port("x", "nohost").is_err());
        // Only served security protocols, and only one listener (never served in part).
        for bad in [
            "SSL://h:1",
            "SASL_SSL://h:1",
            "PLAINTEXT://h:1,PLAINTEXT://h:2",
        ] {
            let err = parse_host_port("--listen", bad).unwrap_err().to_string();
            assert!(err.contains("--listen"), "{bad}: {err}");
        }
        let err = Settings::resolve(
            &cli(&["--listen", "SSL://127.0.0.1:9093"]),
            std::iter::empty(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--listen") && err.contains("SSL"), "{err}");
        let err = Settings::resolve(
            &cli(&["--set", "listeners=SSL://127.0.0.1:9093"]),
            std::iter::empty(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("'listeners'") && err.contains("SSL"), "{err}");
    }
}
