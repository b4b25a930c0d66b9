//! SCRAM credentials (RFC 5802, RFC 7677) as the metadata log keeps them: per user and mechanism,
//! the salt, the iteration count, StoredKey and ServerKey — never the password nor the salted
//! password (Kafka's UserScramCredentialRecord). They replicate with the metadata log, so every
//! broker authenticates the same users, and survive restarts. The controller validates changes
//! with Kafka's rules; the front end derives the keys and runs the exchange.

use serde::{Deserialize, Serialize};

/// Fewest iterations a credential may use (Kafka's `ScramMechanism.minIterations`).
pub const SCRAM_ITERATIONS_MIN: i32 = 4096;
/// Most iterations a credential may use (Kafka's limit in AlterUserScramCredentials).
pub const SCRAM_ITERATIONS_MAX: i32 = 16384;

/// A SCRAM mechanism, with Kafka's type codes (`ScramMechanism.type()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// Kafka's code on the wire: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512 (0 = unknown).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(code: i8) -> Option<Self> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// One user's credential for one mechanism. `Debug` leaves the keys out.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    /// H(ClientKey), ClientKey = HMAC(SaltedPassword, "Client Key").
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}
