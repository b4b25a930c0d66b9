//! The broker's settings from flags, environment and a `server.properties`-style file.
//!
//! Precedence, lowest first: built-in defaults, `--config FILE`, `MILLRACE_*` environment
//! variables, `--set name=value` flags, then the dedicated flags (`--node-id`, `--data-dir`,
//! `--listen`, `--advertised-listener`: the address of the listener named PLAINTEXT, replacing
//! or adding it among `listeners` / `advertised.listeners`). Every key uses Kafka's name and is
//! validated by
//! `millrace_cluster::config`; an unknown key or bad value stops the broker with exit code 2 and
//! one line naming the key.
//!
//! Environment: `MILLRACE_NUM_PARTITIONS=3` sets `num.partitions` (upper case, dots as
//! underscores). `MILLRACE_NODE_ID`, `MILLRACE_DATA_DIR`, `MILLRACE_LISTEN`,
//! `MILLRACE_ADVERTISED_LISTENER` and `MILLRACE_CONFIG` are the flags' own variables;
//! `MILLRACE_LOG` (log filter) and the test scripts' `MILLRACE_BIN`, `MILLRACE_START_TIMEOUT`,
//! `MILLRACE_BUILD_TIMEOUT`, `MILLRACE_KEEP_WORK` and `MILLRACE_WEED` (SeaweedFS for the tiered
//! storage tests) are not config keys.
//! `MILLRACE_CONTROLLER_LISTEN` and `MILLRACE_CONTROLLER_VOTERS` are the cluster flags' variables;
//! `MILLRACE_TEST_PEER_ADDRESSES` (`2=host:port,3=host:port`: where this node reaches other
//! brokers' Kafka listeners, for the fault-injection proxy) and `MILLRACE_TEST_FAIL_SYNC` are test
//! knobs, not config keys.
//!
//! The cluster: with `--controller-voters 1@host:port,2@host:port,…` (Kafka's
//! `controller.quorum.voters`) the node joins that controller quorum — as a voter when
//! `process.roles` includes `controller` (the default), as an observer with
//! `process.roles=broker` — and `--controller-listen host:port` is its controller listener
//! (default: its own entry in the voters list). Without voters the broker is a single-node cluster,
//! a quorum of one.
//!
//! Tiered storage (`remote.log.storage.system.enable`, `millrace.remote.storage.*`, Kafka's
//! `remote.log.manager.task.interval.ms`, `remote.fetch.max.wait.ms`, `log.local.retention.*`)
//! is set like any other key; `millrace_cluster::config_tiered` refuses an enabled system without
//! `millrace.remote.storage.url`, and [`Settings::warnings`] names a url given while the system is
//! off (logged at start-up, not a refusal).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use millrace_cluster::config::{validate_value, ConfigType};
use millrace_cluster::listeners::{with_plaintext_listener, SecurityProtocol};
use millrace_cluster::{BrokerConfig, ConfigError};
use millrace_frontend::inter_broker::InterBrokerError;
use millrace_quorum::tls::ControllerTlsHandle;
use millrace_replication::client_security::InterBrokerSecurity;

/// Default Kafka listener.
#[cfg(test)]
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
    "LOG_FORMAT",
    "HTTP_LISTEN",
    "BIN",
    "START_TIMEOUT",
    "BUILD_TIMEOUT",
    "KEEP_WORK",
    "WEED",
    "CONTROLLER_LISTEN",
    "CONTROLLER_VOTERS",
    "TEST_PEER_ADDRESSES",
    "TEST_FAIL_SYNC",
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
    /// Address of the PLAINTEXT Kafka listener (host:port; port 0 picks a free port). Other
    /// listeners come from the `listeners` config.
    #[arg(long, env = "MILLRACE_LISTEN")]
    pub listen: Option<String>,
    /// host:port that clients of the PLAINTEXT listener are told to connect to (default: the
    /// listener's address).
    #[arg(long, env = "MILLRACE_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// A broker config under Kafka's name, e.g. --set num.partitions=3 (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// A server.properties-style file of broker configs.
    #[arg(long, env = "MILLRACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// host:port of this node's controller listener (the metadata quorum's traffic).
    #[arg(long, env = "MILLRACE_CONTROLLER_LISTEN")]
    pub controller_listen: Option<String>,
    /// The controller quorum, `1@host:port,2@host:port,3@host:port` (Kafka's
    /// controller.quorum.voters). Without it the broker is a single-node cluster.
    #[arg(long, env = "MILLRACE_CONTROLLER_VOTERS")]
    pub controller_voters: Option<String>,
    /// host:port of the HTTP listener serving /metrics, /health and /ready (config
    /// millrace.http.listen; off when unset).
    #[arg(long, env = "MILLRACE_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// Log line format on stderr: `text` (default) or `json` (one object per line).
    #[arg(long, env = "MILLRACE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// This node in a controller quorum.
#[derive(Debug, Clone)]
pub struct QuorumSettings {
    /// controller.quorum.voters: node id → host:port.
    pub voters: BTreeMap<i32, String>,
    /// Where this node's controller listener binds.
    pub listen: SocketAddr,
    /// A voter (process.roles includes controller) or an observer (broker only).
    pub voter: bool,
}

/// One Kafka listener to bind.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// Upper case.
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// `None` = advertise the bound address.
    pub advertised: Option<(String, u16)>,
}

/// Everything the broker needs to start.
#[derive(Debug)]
pub struct Settings {
    pub config: BrokerConfig,
    /// The first log dir (`--data-dir`, else `log.dirs`' first entry or `log.dir`): the store's
    /// first dir, and where the metadata log, group snapshots and `meta.properties` live.
    pub data_dir: PathBuf,
    /// `log.dirs` after its first entry: further log dirs of the store (JBOD).
    pub extra_log_dirs: Vec<PathBuf>,
    /// Every Kafka listener, in the order `listeners` gives them.
    pub listeners: Vec<ListenerSettings>,
    /// The name of the listener brokers reach each other on (and the one the ready line names).
    pub inter_broker_listener: String,
    /// How this broker connects to the others' inter-broker listener (its TLS and SASL).
    pub inter_broker: InterBrokerSecurity,
    /// Mutual TLS on the controller listener (`None`: plain TCP).
    pub controller_tls: Option<ControllerTlsHandle>,
    /// `None` = a single-node cluster (a quorum of one, no controller listener).
    pub quorum: Option<QuorumSettings>,
    /// Test only: inter-broker addresses replacing the registered ones.
    pub peer_addresses: BTreeMap<i32, String>,
    /// The HTTP listener (metrics, health, readiness); `None` = off.
    pub http_listen: Option<SocketAddr>,
}

/// A settings problem: always names the key or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the inter-broker listener: {0}")]
    InterBroker(#[from] InterBrokerError),
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

/// A listener's `host:port` (as [`parse_host_port`] reads it) resolved to the address to bind.
fn bind_address(what: &str, text: &str) -> Result<SocketAddr, SettingsError> {
    let (host, port) = parse_host_port(what, text)?;
    format!("{host}:{port}")
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|_| invalid(what, text, "not an address this host can bind"))
}

/// `PLAINTEXT://host:port` or plain `host:port`: one address (a flag's, or a quorum voter's).
fn parse_host_port(what: &str, value: &str) -> Result<(String, u16), SettingsError> {
    validate_value(what, value, ConfigType::Listeners)?;
    let mut listeners = value.split(',').map(str::trim).filter(|l| !l.is_empty());
    let first = listeners.next().unwrap_or_default();
    if listeners.next().is_some() {
        return Err(invalid(
            what,
            value,
            "give a single host:port (more listeners go in the 'listeners' config)",
        ));
    }
    if let Some((name, _)) = first.split_once("://") {
        if !name.trim().eq_ignore_ascii_case("PLAINTEXT") {
            return Err(invalid(
                what,
                value,
                "this is the PLAINTEXT listener's address; other listeners go in the 'listeners' config",
            ));
        }
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
        let env: Vec<(String, String)> = env.collect();
        let peer_addresses_var = env
            .iter()
            .find(|(k, _)| k == "MILLRACE_TEST_PEER_ADDRESSES")
            .map(|(_, v)| v.clone());
        let env = env_layer(env.into_iter());
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
        if let Some(v) = &cli.controller_voters {
            flags.insert("controller.quorum.voters".to_string(), v.clone());
        }
        if let Some(l) = &cli.controller_listen {
            flags.insert("controller.listener".to_string(), l.clone());
        }
        if let Some(l) = &cli.http_listen {
            flags.insert("millrace.http.listen".to_string(), l.clone());
        }
        // The dedicated flags are static broker configs under Kafka's names too, so that
        // DescribeConfigs reports them as STATIC_BROKER_CONFIG, as Kafka does for server.properties.
        // Checked here first so that a bad value names the flag.
        for (flag, key, value) in [
            ("--listen", "listeners", &cli.listen),
            (
                "--advertised-listener",
                "advertised.listeners",
                &cli.advertised_listener,
            ),
        ] {
            if let Some(value) = value {
                let (host, port) = parse_host_port(flag, value)?;
                let below = [&sets, &env, &file]
                    .into_iter()
                    .find_map(|layer| layer.get(key))
                    .map(String::as_str);
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                flags.insert(
                    key.to_string(),
                    with_plaintext_listener(below, &format!("{host}:{port}")),
                );
            }
        }
        if let Some(dir) = &cli.data_dir {
            flags.insert("log.dirs".to_string(), dir.display().to_string());
        }
        let config = BrokerConfig::from_layers([&file, &env, &sets, &flags])?;

        let data_dir = cli
            .data_dir
            .clone()
            .or_else(|| config.log_dir().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let extra_log_dirs: Vec<PathBuf> = if cli.data_dir.is_some() {
            Vec::new()
        } else {
            config
                .log_dirs()
                .into_iter()
                .skip(1)
                .map(PathBuf::from)
                .collect()
        };
        if let Some(dup) = extra_log_dirs
            .iter()
            .enumerate()
            .find(|(i, d)| **d == data_dir || extra_log_dirs.iter().skip(i + 1).any(|e| e == *d))
        {
            return Err(SettingsError::Invalid {
                what: "log.dirs".into(),
                value: dup.1.display().to_string(),
                reason: "a log dir is named twice".into(),
            });
        }
        let advertised = config.advertised_listeners()?;
        let mut listeners = Vec::new();
        for listener in config.listeners()? {
            let address = listener.address;
            let what = if address.name == "PLAINTEXT" && cli.listen.is_some() {
                "--listen"
            } else {
                "listeners"
            };
            let bind = bind_address(what, &format!("[{}]:{}", address.host, address.port))?;
            listeners.push(ListenerSettings {
                advertised: advertised
                    .iter()
                    .find(|a| a.name == address.name)
                    .map(|a| (a.host.clone(), a.port)),
                name: address.name,
                protocol: listener.protocol,
                bind,
            });
        }
        let inter_broker_listener = config.inter_broker_listener()?.address.name;
        let inter_broker = millrace_frontend::inter_broker::security(&config)?;
        let controller_tls = millrace_frontend::inter_broker::controller_tls(&config)?;
        let quorum = quorum_settings(&config)?;
        let http_listen = match config.explicit("millrace.http.listen") {
            Some(text) => Some(bind_address("millrace.http.listen", text)?),
            None => None,
        };
        let peer_addresses = match peer_addresses_var {
            Some(v) => parse_peer_addresses(&v)?,
            None => BTreeMap::new(),
        };
        Ok(Self {
            config,
            data_dir,
            extra_log_dirs,
            listeners,
            inter_broker_listener,
            inter_broker,
            controller_tls,
            quorum,
            peer_addresses,
            http_listen,
        })
    }

    /// Settings that are usable but probably not what the operator meant, one line each, for
    /// the start-up log.
    pub fn warnings(&self) -> Vec<String> {
        self.config.remote_storage_warning().into_iter().collect()
    }
}

/// `1@host:port,2@host:port` → id → host:port.
fn parse_voters(value: &str) -> Result<BTreeMap<i32, String>, SettingsError> {
    let voters = parse_id_addresses("controller.quorum.voters", value, '@')?;
    if voters.is_empty() {
        return Err(invalid("controller.quorum.voters", value, "no voters"));
    }
    Ok(voters)
}

/// `id<sep>host:port,…` → id → `host:port`; ids are non-negative and appear once.
fn parse_id_addresses(
    what: &str,
    value: &str,
    sep: char,
) -> Result<BTreeMap<i32, String>, SettingsError> {
    let mut out = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once(sep)
            .ok_or_else(|| invalid(what, value, &format!("expected id{sep}host:port entries")))?;
        let id: i32 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid(what, value, "a node id is not a non-negative integer"))?;
        let (host, port) = parse_host_port(what, addr)?;
        if out.insert(id, format!("{host}:{port}")).is_some() {
            return Err(invalid(what, value, "a node id appears twice"));
        }
    }
    Ok(out)
}

fn quorum_settings(config: &BrokerConfig) -> Result<Option<QuorumSettings>, SettingsError> {
    let Some(voters_text) = config.explicit("controller.quorum.voters") else {
        return Ok(None);
    };
    let voters = parse_voters(voters_text)?;
    let node_id = config.node_id();
    let voter = config
        .get("process.roles")
        .is_none_or(|r| r.contains("controller"));
    if voter && !voters.contains_key(&node_id) {
        return Err(invalid(
            "controller.quorum.voters",
            voters_text,
            &format!("node.id {node_id} is a controller (process.roles) but not in the voters"),
        ));
    }
    if !voter && voters.contains_key(&node_id) {
        return Err(invalid(
            "process.roles",
            "broker",
            &format!(
                "node.id {node_id} is in controller.quorum.voters, so it must be a controller"
            ),
        ));
    }
    let listen_text = match (config.explicit("controller.listener"), voters.get(&node_id)) {
        (Some(l), _) => l.to_string(),
        (None, Some(own)) => own.clone(),
        (None, None) => {
            return Err(invalid(
                "--controller-listen",
                "",
                "a broker-only node needs a controller listener to receive the metadata log",
            ))
        }
    };
    let listen = bind_address("--controller-listen", &listen_text)?;
    Ok(Some(QuorumSettings {
        voters,
        listen,
        voter,
    }))
}

/// `2=host:port,3=host:port` (MILLRACE_TEST_PEER_ADDRESSES).
fn parse_peer_addresses(value: &str) -> Result<BTreeMap<i32, String>, SettingsError> {
    parse_id_addresses("MILLRACE_TEST_PEER_ADDRESSES", value, '=')
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
        assert_eq!(s.listeners.len(), 1);
        assert_eq!(s.listeners[0].bind.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.listeners[0].name, "PLAINTEXT");
        assert_eq!(s.inter_broker_listener, "PLAINTEXT");
        assert_eq!(s.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(s.config.node_id(), 1);
        assert!(s.listeners[0].advertised.is_none());
    }

    #[test]
    fn log_dirs_is_a_list() {
        let s = Settings::resolve(
            &cli(&["--set", "log.dirs=/d/a, /d/b,,/d/c"]),
            std::iter::empty(),
        )
        .unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/d/a"));
        assert_eq!(
            s.extra_log_dirs,
            vec![PathBuf::from("/d/b"), PathBuf::from("/d/c")]
        );
        let s = Settings::resolve(&cli(&["--set", "log.dir=/d/x"]), std::iter::empty()).unwrap();
        assert_eq!(
            (s.data_dir, s.extra_log_dirs),
            (PathBuf::from("/d/x"), Vec::new())
        );
        assert!(
            Settings::resolve(&cli(&["--set", "log.dirs=/d/a,/d/a"]), std::iter::empty()).is_err()
        );
    }

    #[test]
    fn dedicated_flags_are_static_broker_configs() {
        let s = Settings::resolve(
            &cli(&[
                "--listen",
                "127.0.0.1:19092",
                "--advertised-listener",
                "broker-1:9092",
                "--data-dir",
                "/var/lib/millrace",
            ]),
            std::iter::empty(),
        )
        .unwrap();
        assert_eq!(
            s.config.explicit("listeners"),
            Some("PLAINTEXT://127.0.0.1:19092")
        );
        assert_eq!(
            s.config.explicit("advertised.listeners"),
            Some("PLAINTEXT://broker-1:9092")
        );
        assert_eq!(s.config.explicit("log.dirs"), Some("/var/lib/millrace"));
        assert_eq!(
            s.config.source("advertised.listeners"),
            millrace_cluster::ConfigSource::StaticBrokerConfig
        );
        assert_eq!(s.listeners[0].bind.to_string(), "127.0.0.1:19092");
        assert_eq!(
            s.listeners[0].advertised,
            Some(("broker-1".to_string(), 9092))
        );
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
        assert_eq!(s.listeners[0].bind.port(), 19092);
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
        // The flags name the PLAINTEXT listener's one address.
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
        assert!(
            err.contains("--listen") && err.contains("PLAINTEXT"),
            "{err}"
        );
        // A listener name the protocol map does not know.
        let err = Settings::resolve(
            &cli(&["--set", "listeners=PLAINTEXT://:1,CLIENTS://127.0.0.1:9093"]),
            std::iter::empty(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("'listeners'") && err.contains("CLIENTS"),
            "{err}"
        );
    }

    #[test]
    fn tiered_storage_without_a_url_is_refused_and_a_lone_url_warns() {
        let err = Settings::resolve(
            &cli(&["--set", "remote.log.storage.system.enable=true"]),
            std::iter::empty(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("millrace.remote.storage.url")
                && err.contains("remote.log.storage.system.enable=true")
                && !err.contains('\n'),
            "{err}"
        );
        // The same from the environment, and accepted once the url is there too.
        let vars = [("MILLRACE_REMOTE_LOG_STORAGE_SYSTEM_ENABLE", "true")];
        assert!(Settings::resolve(&cli(&[]), env(&vars).into_iter()).is_err());
        let s = Settings::resolve(
            &cli(&[
                "--set",
                "millrace.remote.storage.url=file:///var/tmp/tiered",
            ]),
            env(&vars).into_iter(),
        )
        .unwrap();
        let remote = s.config.remote_storage();
        assert!(remote.remote_log_storage_system_enable);
        assert_eq!(
            remote.remote_storage_url.as_deref(),
            Some("file:///var/tmp/tiered")
        );
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        // A url with the system off starts, with one warning line.
        let s = Settings::resolve(
            &cli(&[
                "--set",
                "millrace.remote.storage.url=file:///var/tmp/tiered",
            ]),
            std::iter::empty(),
        )
        .unwrap();
        assert!(!s.config.remote_log_storage_system_enable());
        let warnings = s.warnings();
        assert!(
            matches!(&warnings[..], [w] if w.contains("remote.log.storage.system.enable")),
            "{warnings:?}"
        );
        // The defaults, as DescribeConfigs will show them.
        let s = Settings::resolve(&cli(&[]), std::iter::empty()).unwrap();
        let remote = s.config.remote_storage();
        assert_eq!(remote.remote_storage_max_pending_bytes, 10 << 30);
        assert_eq!(remote.remote_storage_cache_bytes, 64 << 20);
        assert_eq!(remote.remote_storage_orphan_grace_ms, 600_000);
        assert_eq!(remote.remote_log_manager_task_interval_ms, 30_000);
        assert_eq!(remote.remote_fetch_max_wait_ms, 500);
    }

    #[test]
    fn the_listen_flag_is_the_plaintext_listener_among_the_others() {
        let s = Settings::resolve(
            &cli(&[
                "--listen",
                "127.0.0.1:0",
                "--advertised-listener",
                "broker-1:9092",
                "--set",
                "listeners=SSL://127.0.0.1:0,MTLS://127.0.0.1:0,PLAINTEXT://:1",
                "--set",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                "--set",
                "advertised.listeners=SSL://broker-1:9093",
            ]),
            std::iter::empty(),
        )
        .unwrap();
        let names: Vec<&str> = s.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["PLAINTEXT", "SSL", "MTLS"]);
        assert_eq!(s.listeners[0].bind.to_string(), "127.0.0.1:0");
        assert_eq!(s.listeners[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(
            s.listeners[0].advertised,
            Some(("broker-1".to_string(), 9092))
        );
        assert_eq!(
            s.listeners[1].advertised,
            Some(("broker-1".to_string(), 9093))
        );
        assert_eq!(s.listeners[2].advertised, None);
        assert_eq!(s.inter_broker_listener, "PLAINTEXT");
    }
}
