//! SCRAM credentials as Kafka's admin client sends them in AlterUserScramCredentials: the salted
//! password (PBKDF2 with the mechanism's HMAC), never the password itself. Mechanism types are
//! Kafka's: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.

#![allow(dead_code)]

use std::num::NonZeroU32;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::protocol::StrBytes;
use ring::{digest, pbkdf2};

pub const SHA256: i8 = 1;
pub const SHA512: i8 = 2;

/// SaltedPassword = PBKDF2(password, salt, iterations) (RFC 5802's Hi).
pub fn salted_password(mechanism: i8, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let (algorithm, digest) = if mechanism == SHA256 {
        (pbkdf2::PBKDF2_HMAC_SHA256, &digest::SHA256)
    } else {
        (pbkdf2::PBKDF2_HMAC_SHA512, &digest::SHA512)
    };
    let mut out = vec![0u8; digest.output_len()];
    pbkdf2::derive(
        algorithm,
        NonZeroU32::new(iterations).expect("iterations"),
        salt,
        password.as_bytes(),
        &mut out,
    );
    out
}

/// A credential for `user` (salt `salt-of-<user>`).
pub fn upsertion(
    user: &str,
    mechanism: i8,
    password: &str,
    iterations: i32,
) -> ScramCredentialUpsertion {
    let salt = format!("salt-of-{user}").into_bytes();
    let salted = salted_password(
        mechanism,
        password,
        &salt,
        u32::try_from(iterations).expect("iterations"),
    );
    ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.to_string()))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(Bytes::from(salt))
        .with_salted_password(Bytes::from(salted))
}
