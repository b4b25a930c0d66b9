//! TLS on a listener whose security protocol is SSL: the rustls server configuration built from
//! Kafka's `ssl.*` configs for that listener (`listener.name.<name>.ssl.*` first), and its reload
//! when the files behind it change.
//!
//! - **Keystore**: `ssl.keystore.type=PEM`, with `ssl.keystore.location` (a PEM file holding the
//!   certificate chain and the private key) or `ssl.keystore.certificate.chain` and
//!   `ssl.keystore.key` (PEM text). JKS and PKCS12 stores are refused at start-up with a message
//!   naming the key; so is an encrypted private key (`ssl.key.password`): rustls reads
//!   unencrypted PKCS#8, PKCS#1 and SEC1 keys.
//! - **Client certificates**: `ssl.client.auth` = `none` (default), `requested` (verified when
//!   sent) or `required`, against the CA certificates of `ssl.truststore.location` or
//!   `ssl.truststore.certificates` (`ssl.truststore.type=PEM`).
//! - **Protocols**: `ssl.enabled.protocols`, of TLSv1.2 and TLSv1.3.
//! - **Reload**: [`TlsListener::reload_if_changed`] compares each file's size, modification time
//!   and inode with those it last saw and, when one changed, builds a new configuration;
//!   connections accepted from then on use it, open ones keep theirs. A file that cannot be read
//!   or parsed (half-written, say) keeps the previous configuration, with one warning, and is
//!   tried again when it changes again. The server checks every [`TLS_FILES_CHECK_INTERVAL`].
//! - On a SASL_SSL listener only `listener.name.<name>.ssl.client.auth` is read (KIP-684).
//!
//! Errors are [`TlsError`]s naming the config key or file at fault.

use crate::principal::{PrincipalMapper, DEFAULT_MAPPING_RULES};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use millrace_cluster::listeners::{SecurityProtocol, LISTENER_PREFIX};
use millrace_cluster::BrokerConfig;
use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::pki_types::{ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme, SupportedProtocolVersion,
};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

/// How often a TLS listener looks at its keystore and truststore files for changes.
pub const TLS_FILES_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Why a listener's TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("listener {listener}: {key}: {reason}")]
    Config {
        listener: String,
        key: String,
        reason: String,
    },
    #[error("listener {listener}: cannot read {path} ({key}): {source}")]
    Read {
        listener: String,
        key: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listener {listener}: {what}: {source}")]
    Rustls {
        listener: String,
        what: String,
        source: rustls::Error,
    },
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// Where PEM text comes from: a file (reloadable) or the config itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PemSource {
    File { key: String, path: PathBuf },
    Inline { key: String, text: String },
}

/// One listener's TLS settings, read from the broker config.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    listener: String,
    /// The certificate chain and the key: one file, or two inline values.
    chain: PemSource,
    key: PemSource,
    trust: Option<PemSource>,
    client_auth: ClientAuth,
    protocols: Vec<&'static SupportedProtocolVersion>,
    /// `ssl.principal.mapping.rules`: a client certificate's subject → principal name.
    principal_mapper: Arc<PrincipalMapper>,
    /// ALPN protocols offered, most preferred first (none on a Kafka listener; `h2` and
    /// `http/1.1` on the HTTP listener).
    alpn: Vec<Vec<u8>>,
}

impl TlsSettings {
    /// The settings of listener `listener` (upper case), or the first config problem.
    pub fn from_config(config: &BrokerConfig, listener: &str) -> Result<Self, TlsError> {
        let get = |key: &str| config.listener_get(listener, key).map(str::trim);
        let wrong = |key: &str, reason: String| TlsError::Config {
            listener: listener.to_string(),
            key: key.to_string(),
            reason,
        };
        let keystore_type = get("ssl.keystore.type").unwrap_or("JKS");
        if keystore_type != "PEM" {
            return Err(wrong(
                "ssl.keystore.type",
                format!("{keystore_type} is not served; use PEM"),
            ));
        }
        if get("ssl.key.password").is_some_and(|p| !p.is_empty()) {
            return Err(wrong(
                "ssl.key.password",
                "encrypted private keys are not served; give an unencrypted PKCS#8 key and \
                 leave ssl.key.password unset"
                    .to_string(),
            ));
        }
        let (chain, key) = match (
            get("ssl.keystore.location").filter(|l| !l.is_empty()),
            get("ssl.keystore.certificate.chain").filter(|c| !c.is_empty()),
            get("ssl.keystore.key").filter(|k| !k.is_empty()),
        ) {
            (Some(path), None, None) => {
                let file = PemSource::File {
                    key: "ssl.keystore.location".to_string(),
                    path: PathBuf::from(path),
                };
                (file.clone(), file)
            }
            (None, Some(chain), Some(key)) => (
                PemSource::Inline {
                    key: "ssl.keystore.certificate.chain".to_string(),
                    text: chain.to_string(),
                },
                PemSource::Inline {
                    key: "ssl.keystore.key".to_string(),
                    text: key.to_string(),
                },
            ),
            _ => {
                return Err(wrong(
                    "ssl.keystore.location",
                    "an SSL listener needs ssl.keystore.location, or both \
                     ssl.keystore.certificate.chain and ssl.keystore.key (and not both ways)"
                        .to_string(),
                ))
            }
        };
        let trust = match (
            get("ssl.truststore.location").filter(|l| !l.is_empty()),
            get("ssl.truststore.certificates").filter(|c| !c.is_empty()),
        ) {
            (None, None) => None,
            (Some(path), None) => Some(PemSource::File {
                key: "ssl.truststore.location".to_string(),
                path: PathBuf::from(path),
            }),
            (None, Some(text)) => Some(PemSource::Inline {
                key: "ssl.truststore.certificates".to_string(),
                text: text.to_string(),
            }),
            (Some(_), Some(_)) => {
                return Err(wrong(
                    "ssl.truststore.location",
                    "set ssl.truststore.location or ssl.truststore.certificates, not both"
                        .to_string(),
                ))
            }
        };
        if trust.is_some() {
            let truststore_type = get("ssl.truststore.type").unwrap_or("JKS");
            if truststore_type != "PEM" {
                return Err(wrong(
                    "ssl.truststore.type",
                    format!("{truststore_type} is not served; use PEM"),
                ));
            }
        }
        // KIP-684: on a SASL_SSL listener only the listener-prefixed `ssl.client.auth` counts
        // (SASL authenticates the client there).
        let sasl_ssl = config
            .security_protocol_map()
            .ok()
            .and_then(|map| map.get(listener).copied())
            == Some(SecurityProtocol::SaslSsl);
        let client_auth = if sasl_ssl {
            let prefixed = format!(
                "{LISTENER_PREFIX}{}.ssl.client.auth",
                listener.to_ascii_lowercase()
            );
            config.explicit(&prefixed).unwrap_or("none").trim()
        } else {
            get("ssl.client.auth").unwrap_or("none")
        };
        let client_auth = match client_auth {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            other => {
                return Err(wrong(
                    "ssl.client.auth",
                    format!("{other}: expected none, requested or required"),
                ))
            }
        };
        if client_auth != ClientAuth::None && trust.is_none() {
            return Err(wrong(
                "ssl.client.auth",
                "verifying client certificates needs ssl.truststore.location or \
                 ssl.truststore.certificates"
                    .to_string(),
            ));
        }
        let enabled = get("ssl.enabled.protocols").unwrap_or("TLSv1.2,TLSv1.3");
        let mut protocols = Vec::new();
        for name in enabled.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            protocols.push(match name {
                "TLSv1.2" => &rustls::version::TLS12,
                "TLSv1.3" => &rustls::version::TLS13,
                other => {
                    return Err(wrong(
                        "ssl.enabled.protocols",
                        format!("{other} is not served (TLSv1.2 and TLSv1.3 are)"),
                    ))
                }
            });
        }
        if protocols.is_empty() {
            return Err(wrong(
                "ssl.enabled.protocols",
                "no protocol enabled".to_string(),
            ));
        }
        let rules = get("ssl.principal.mapping.rules").unwrap_or(DEFAULT_MAPPING_RULES);
        let principal_mapper = Arc::new(
            PrincipalMapper::parse(rules)
                .map_err(|e| wrong("ssl.principal.mapping.rules", e.to_string()))?,
        );
        Ok(Self {
            listener: listener.to_string(),
            chain,
            key,
            trust,
            client_auth,
            protocols,
            principal_mapper,
            alpn: Vec::new(),
        })
    }

    /// The same settings, offering `protocols` in ALPN (most preferred first).
    pub fn with_alpn(mut self, protocols: &[&[u8]]) -> Self {
        self.alpn = protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    /// `ssl.client.auth` as read for this listener.
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// The same settings with client certificates required, whatever `ssl.client.auth` says:
    /// mutual TLS, for a listener with no other authentication (the controller listener).
    pub fn requiring_client_certificates(mut self) -> Result<Self, TlsError> {
        if self.trust.is_none() {
            return Err(TlsError::Config {
                listener: self.listener.clone(),
                key: "ssl.truststore.location".to_string(),
                reason: "mutual TLS checks the other nodes' certificates against a truststore: \
                         set ssl.truststore.location or ssl.truststore.certificates"
                    .to_string(),
            });
        }
        self.client_auth = ClientAuth::Required;
        Ok(self)
    }

    /// What the files behind the configuration look like now (compared to tell a change).
    pub(crate) fn stamps(&self) -> FileStamps {
        self.files().iter().map(|f| stamp(f)).collect()
    }

    /// The files the configuration is built from, for change detection.
    fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = Vec::new();
        for source in [Some(&self.chain), Some(&self.key), self.trust.as_ref()]
            .into_iter()
            .flatten()
        {
            if let PemSource::File { path, .. } = source {
                if !files.contains(&path.as_path()) {
                    files.push(path);
                }
            }
        }
        files
    }

    fn read(&self, source: &PemSource) -> Result<Vec<u8>, TlsError> {
        match source {
            PemSource::Inline { text, .. } => Ok(text.as_bytes().to_vec()),
            PemSource::File { key, path } => std::fs::read(path).map_err(|e| TlsError::Read {
                listener: self.listener.clone(),
                key: key.clone(),
                path: path.clone(),
                source: e,
            }),
        }
    }

    fn wrong(&self, source: &PemSource, reason: impl Into<String>) -> TlsError {
        let key = match source {
            PemSource::File { key, .. } | PemSource::Inline { key, .. } => key.clone(),
        };
        TlsError::Config {
            listener: self.listener.clone(),
            key,
            reason: reason.into(),
        }
    }

    /// The certificate chain and its private key, read from the keystore.
    fn certified_key(
        &self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let chain_pem = self.read(&self.chain)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| self.wrong(&self.chain, format!("bad PEM certificate: {e}")))?;
        if chain.is_empty() {
            return Err(self.wrong(&self.chain, "no certificate in it"));
        }
        let key_pem = if self.key == self.chain {
            chain_pem
        } else {
            self.read(&self.key)?
        };
        if contains(&key_pem, b"ENCRYPTED PRIVATE KEY") {
            return Err(self.wrong(
                &self.key,
                "the private key is encrypted; encrypted keys are not served",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| self.wrong(&self.key, format!("no usable private key: {e}")))?;
        Ok((chain, key))
    }

    /// The CA certificates of the truststore.
    fn roots(&self, trust: &PemSource) -> Result<RootCertStore, TlsError> {
        let pem = self.read(trust)?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| self.wrong(trust, format!("bad PEM certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| self.rustls("a truststore certificate", e))?;
        }
        if roots.is_empty() {
            return Err(self.wrong(trust, "no CA certificate in it"));
        }
        Ok(roots)
    }

    /// Reads the PEM material and builds the rustls configuration.
    pub fn build(&self) -> Result<ServerConfig, TlsError> {
        let (chain, key) = self.certified_key()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.protocols)
            .map_err(|e| self.rustls("protocol versions", e))?;
        let builder = match (&self.trust, self.client_auth) {
            (Some(trust), auth) if auth != ClientAuth::None => {
                let roots = self.roots(trust)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == ClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier.build().map_err(|e| TlsError::Config {
                    listener: self.listener.clone(),
                    key: "ssl.truststore.location".to_string(),
                    reason: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| self.rustls("the certificate and key", e))?;
        config.alpn_protocols = self.alpn.clone();
        Ok(config)
    }

    /// The client side of the same settings, for this broker's connections to the others' listener
    /// of this name: their certificates are checked against the truststore (required here, as
    /// there is no system store to fall back on) and, with `verify_hostname`
    /// (`ssl.endpoint.identification.algorithm=https`, Kafka's default), against the address
    /// dialled; the keystore's certificate is offered to a server that asks for one.
    pub fn build_client(&self, verify_hostname: bool) -> Result<ClientConfig, TlsError> {
        let trust = self.trust.as_ref().ok_or_else(|| TlsError::Config {
            listener: self.listener.clone(),
            key: "ssl.truststore.location".to_string(),
            reason: "this is the inter-broker listener: checking the other brokers' \
                     certificates needs ssl.truststore.location or ssl.truststore.certificates"
                .to_string(),
        })?;
        let roots = Arc::new(self.roots(trust)?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Config {
                listener: self.listener.clone(),
                key: "ssl.truststore.location".to_string(),
                reason: e.to_string(),
            })?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.protocols)
            .map_err(|e| self.rustls("protocol versions", e))?;
        let builder = if verify_hostname {
            builder.with_webpki_verifier(verifier)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyNameVerifier(verifier)))
        };
        let (chain, key) = self.certified_key()?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| self.rustls("the certificate and key", e))
    }

    fn rustls(&self, what: &str, source: rustls::Error) -> TlsError {
        TlsError::Rustls {
            listener: self.listener.clone(),
            what: what.to_string(),
            source,
        }
    }
}

/// A server certificate verifier that checks the chain against the truststore but not the name
/// (`ssl.endpoint.identification.algorithm` empty, as Kafka allows): the web PKI verifier checks
/// the name last, so its name errors are the only ones forgiven.
#[derive(Debug)]
struct AnyNameVerifier(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyNameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a file looked like when the configuration was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// One stamp per file of a configuration, `None` for a file that cannot be looked at.
pub(crate) type FileStamps = Vec<Option<FileStamp>>;

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode: meta.ino(),
    })
}

/// A TLS listener's current configuration, swapped when its files change.
pub struct TlsListener {
    settings: TlsSettings,
    current: RwLock<(TlsAcceptor, FileStamps)>,
}

impl TlsListener {
    /// Builds the configuration once; an error stops the broker at start-up.
    pub fn new(settings: TlsSettings) -> Result<Arc<Self>, TlsError> {
        let stamps = settings.stamps();
        let config = settings.build()?;
        Ok(Arc::new(Self {
            settings,
            current: RwLock::new((TlsAcceptor::from(Arc::new(config)), stamps)),
        }))
    }

    /// How a client certificate's subject becomes a principal.
    pub fn principal_mapper(&self) -> Arc<PrincipalMapper> {
        self.settings.principal_mapper.clone()
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current.read().0.clone()
    }

    /// Rebuilds the configuration if a file changed since it was built. `true` when it was
    /// replaced; a failed rebuild keeps the current one (and is retried at the next check).
    pub fn reload_if_changed(&self) -> bool {
        let stamps = self.settings.stamps();
        if stamps == self.current.read().1 {
            return false;
        }
        match self.settings.build() {
            Ok(config) => {
                *self.current.write() = (TlsAcceptor::from(Arc::new(config)), stamps);
                info!(listener = %self.settings.listener, "TLS keystore or truststore changed; new connections use the new one");
                true
            }
            Err(e) => {
                // Remembered, so that the warning comes once per change of the files, and the
                // next change (the writer finishing, say) is tried again.
                self.current.write().1 = stamps;
                warn!(error = %e, "TLS files changed but cannot be loaded; keeping the previous ones");
                false
            }
        }
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.settings.listener
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A CA and a server certificate it signed, as PEM: (ca cert, server cert, server key).
    fn material() -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let server = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("server");
        (ca_cert.pem(), server.pem(), key.serialize_pem())
    }

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let layer: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BrokerConfig::from_layers([&layer]).expect("config")
    }

    #[test]
    fn keystore_problems_name_their_key() {
        let dir = tempfile::tempdir().expect("dir");
        let (ca, cert, key) = material();
        let pem = dir.path().join("server.pem");
        std::fs::write(&pem, format!("{cert}{key}")).expect("write");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &ca).expect("write");
        let pem = pem.to_str().expect("utf-8");
        let ca_file = ca_file.to_str().expect("utf-8");
        for (pairs, key) in [
            (vec![], "ssl.keystore.type"),
            (vec![("ssl.keystore.type", "PEM")], "ssl.keystore.location"),
            (
                vec![
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", pem),
                    ("ssl.key.password", "secret"),
                ],
                "ssl.key.password",
            ),
            (
                vec![
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", pem),
                    ("ssl.client.auth", "required"),
                ],
                "ssl.client.auth",
            ),
            (
                vec![
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", pem),
                    ("ssl.truststore.location", ca_file),
                ],
                "ssl.truststore.type",
            ),
            (
                vec![
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", pem),
                    ("ssl.enabled.protocols", "TLSv1.1"),
                ],
                "ssl.enabled.protocols",
            ),
        ] {
            let err = TlsSettings::from_config(&config(&pairs), "SSL")
                .and_then(|s| s.build().map(|_| ()))
                .expect_err(&format!("{pairs:?}"))
                .to_string();
            assert!(err.contains(key), "{pairs:?}: {err}");
        }
        // A file holding only a certificate has no key; a missing file names its key and path.
        let only_cert = dir.path().join("cert.pem");
        std::fs::write(&only_cert, &cert).expect("write");
        for (path, want) in [
            (only_cert.to_str().expect("utf-8"), "private key"),
            ("/nonexistent/server.pem", "/nonexistent/server.pem"),
        ] {
            let err = TlsSettings::from_config(
                &config(&[
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", path),
                ]),
                "SSL",
            )
            .expect("settings")
            .build()
            .expect_err(path)
            .to_string();
            assert!(
                err.contains(want) && err.contains("ssl.keystore.location"),
                "{err}"
            );
        }
        // Inline PEM, and listener-prefixed client auth with a PEM truststore.
        let c = config(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &cert),
            ("ssl.keystore.key", &key),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.certificates", &ca),
            ("listener.name.mtls.ssl.client.auth", "required"),
        ]);
        // KIP-684: on a SASL_SSL listener the unprefixed ssl.client.auth does not apply.
        let sasl = config(&[
            ("listeners", "PLAINTEXT://h:1,SSL://h:2,SASL_SSL://h:3"),
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", pem),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", ca_file),
            ("ssl.client.auth", "required"),
        ]);
        let auth = |listener: &str| {
            TlsSettings::from_config(&sasl, listener)
                .expect("settings")
                .client_auth
        };
        assert_eq!(auth("SSL"), ClientAuth::Required);
        assert_eq!(auth("SASL_SSL"), ClientAuth::None);
        let mtls = TlsSettings::from_config(&c, "MTLS").expect("settings");
        assert_eq!(mtls.client_auth, ClientAuth::Required);
        mtls.build().expect("builds");
        assert_eq!(
            TlsSettings::from_config(&c, "SSL")
                .expect("settings")
                .client_auth,
            ClientAuth::None
        );
    }

    #[test]
    fn a_changed_keystore_is_reloaded_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let (_, cert, key) = material();
        let pem = dir.path().join("server.pem");
        std::fs::write(&pem, format!("{cert}{key}")).expect("write");
        let c = config(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", pem.to_str().expect("utf-8")),
        ]);
        let listener =
            TlsListener::new(TlsSettings::from_config(&c, "SSL").expect("settings")).expect("tls");
        assert!(!listener.reload_if_changed(), "nothing changed");
        // Half-written: kept, and tried again later.
        std::fs::write(&pem, &cert[..cert.len() / 2]).expect("write");
        assert!(!listener.reload_if_changed());
        let (_, cert2, key2) = material();
        let staged = dir.path().join("staged.pem");
        std::fs::write(&staged, format!("{cert2}{key2}")).expect("write");
        std::fs::rename(&staged, &pem).expect("rename");
        assert!(listener.reload_if_changed(), "a new keystore is loaded");
        assert!(!listener.reload_if_changed());
    }
}
