//! From `millrace.remote.storage.url` and the standard AWS environment to a configured object
//! store: which store (S3 or a local directory), which bucket and prefix, which endpoint and
//! credentials, and the bounds on every request's time.
//!
//! Accepted URLs: `s3://bucket`, `s3://bucket/some/prefix`, `file:///absolute/path`. S3 settings
//! come only from the environment (`AWS_ENDPOINT_URL` or `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`,
//! `AWS_ALLOW_HTTP`, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`), as every AWS tool reads them, so the
//! broker's config file never holds a secret.
//!
//! Invariants: a misconfiguration is a `TieredError::Config` that names the setting or variable
//! to fix; the description (`StoreTarget::description`) never contains a secret; every request
//! the store makes is bounded in time (`CONNECT_TIMEOUT`, `REQUEST_TIMEOUT`, `RETRY_*`).
//!
//! Not done here: any request (see `remote_storage`); instance-profile or web-identity
//! credentials (only static keys from the environment).

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use tracing::info;

use crate::error::TieredError;

/// The broker setting this module reads.
pub const URL_SETTING: &str = "millrace.remote.storage.url";

/// Seconds to open a TCP (and TLS) connection to the store before the attempt fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for one HTTP request, body included (a multipart part of `MULTIPART_PART_BYTES` needs
/// under 0.3 MB/s to make it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of one request after a connection error, a 5xx or (for reads) a timeout.
pub const RETRY_MAX: usize = 3;
/// No retry starts later than this after the first attempt: an outage surfaces as an error
/// within seconds, and the caller (the remote log manager) decides when to try again.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// The first backoff between retries; it doubles up to `RETRY_BACKOFF_MAX`.
pub const RETRY_BACKOFF_FIRST: Duration = Duration::from_millis(100);
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The region when neither `AWS_REGION` nor `AWS_DEFAULT_REGION` is set (the AWS tools' default).
pub const DEFAULT_REGION: &str = "us-east-1";

/// What the URL and the environment configure.
#[derive(Debug)]
pub struct StoreTarget {
    pub store: Arc<dyn ObjectStore>,
    /// Key prefix inside the store, without leading or trailing `/` (empty for none).
    pub prefix: String,
    /// For logs and errors: `s3://bucket/prefix via http://127.0.0.1:8333` or `file:///path`.
    pub description: String,
}

/// The store that `url` and the environment `env` name.
pub fn open(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<StoreTarget, TieredError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        return open_s3(url, rest, env);
    }
    if let Some(path) = url.strip_prefix("file://") {
        return open_local(url, path);
    }
    Err(unaccepted(url, "unknown scheme"))
}

fn unaccepted(url: &str, why: &str) -> TieredError {
    TieredError::Config(format!(
        "{URL_SETTING}={url:?} is not accepted ({why}); use s3://bucket, s3://bucket/prefix \
         or file:///absolute/path"
    ))
}

fn open_local(url: &str, path: &str) -> Result<StoreTarget, TieredError> {
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return Err(unaccepted(url, "a file:// URL takes an absolute path"));
    }
    std::fs::create_dir_all(path).map_err(|e| {
        TieredError::Config(format!(
            "{URL_SETTING}: cannot create the directory {path}: {e}"
        ))
    })?;
    let store = LocalFileSystem::new_with_prefix(path).map_err(|e| {
        TieredError::Config(format!(
            "{URL_SETTING}: cannot use the directory {path}: {e}"
        ))
    })?;
    Ok(StoreTarget {
        store: Arc::new(store),
        prefix: String::new(),
        description: format!("file://{path}"),
    })
}

fn open_s3(
    url: &str,
    rest: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreTarget, TieredError> {
    if rest.contains(['?', '#', '@']) {
        return Err(unaccepted(url, "no query, fragment or user part"));
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(unaccepted(url, "the bucket is missing"));
    }
    let prefix = prefix
        .split('/')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("/");
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let key_id = var("AWS_ACCESS_KEY_ID");
    let secret = var("AWS_SECRET_ACCESS_KEY");
    let missing: Vec<&str> = [
        ("AWS_ACCESS_KEY_ID", key_id.is_none()),
        ("AWS_SECRET_ACCESS_KEY", secret.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, absent)| absent.then_some(name))
    .collect();
    let (Some(key_id), Some(secret)) = (key_id, secret) else {
        return Err(TieredError::Config(format!(
            "{} not set: {URL_SETTING}={url} takes its credentials from the standard AWS \
             environment variables",
            missing.join(" and ")
        )));
    };
    let allow_http = is_true(var("AWS_ALLOW_HTTP"));
    let endpoint = var("AWS_ENDPOINT_URL").or_else(|| var("AWS_ENDPOINT"));
    if let Some(endpoint) = &endpoint {
        check_endpoint(endpoint, allow_http)?;
    }
    let region = match var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")) {
        Some(region) => region,
        None => {
            info!(
                region = DEFAULT_REGION,
                "neither AWS_REGION nor AWS_DEFAULT_REGION is set: remote storage signs for {DEFAULT_REGION}"
            );
            DEFAULT_REGION.to_string()
        }
    };
    // The client options first: `with_allow_http` writes into them.
    let mut builder = AmazonS3Builder::new()
        .with_client_options(bounded_client())
        .with_bucket_name(bucket)
        .with_region(&region)
        .with_access_key_id(key_id)
        .with_secret_access_key(secret)
        .with_allow_http(allow_http)
        .with_virtual_hosted_style_request(is_true(var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST")))
        .with_retry(bounded_retry());
    if let Some(token) = var("AWS_SESSION_TOKEN") {
        builder = builder.with_token(token);
    }
    if let Some(endpoint) = &endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    let store = builder
        .build()
        .map_err(|e| TieredError::Config(format!("{URL_SETTING}={url}: {e}")))?;
    let via = match &endpoint {
        Some(endpoint) => without_user_info(endpoint),
        None => format!("AWS S3 in {region}"),
    };
    let location = if prefix.is_empty() {
        format!("s3://{bucket}")
    } else {
        format!("s3://{bucket}/{prefix}")
    };
    Ok(StoreTarget {
        store: Arc::new(store),
        prefix,
        description: format!("{location} via {via}"),
    })
}

fn is_true(value: Option<String>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn check_endpoint(endpoint: &str, allow_http: bool) -> Result<(), TieredError> {
    if endpoint.starts_with("https://") {
        return Ok(());
    }
    if endpoint.starts_with("http://") {
        if allow_http {
            return Ok(());
        }
        return Err(TieredError::Config(format!(
            "the S3 endpoint {} is plain http:// and AWS_ALLOW_HTTP is not true; set \
             AWS_ALLOW_HTTP=true to allow it, or use https://",
            without_user_info(endpoint)
        )));
    }
    Err(TieredError::Config(format!(
        "the S3 endpoint {} (AWS_ENDPOINT_URL) must start with https:// or http://",
        without_user_info(endpoint)
    )))
}

/// The endpoint with any `user:password@` removed, for logs.
fn without_user_info(endpoint: &str) -> String {
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return endpoint.to_string();
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => endpoint.to_string(),
    }
}

fn bounded_client() -> ClientOptions {
    ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
}

fn bounded_retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: RETRY_BACKOFF_FIRST,
            max_backoff: RETRY_BACKOFF_MAX,
            base: 2.0,
        },
        max_retries: RETRY_MAX,
        retry_timeout: RETRY_TIMEOUT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    const KEYS: [(&str, &str); 2] = [
        ("AWS_ACCESS_KEY_ID", "id"),
        ("AWS_SECRET_ACCESS_KEY", "very-secret"),
    ];

    fn config_error(url: &str, vars: &[(&str, &str)]) -> String {
        match open(url, &env_of(vars)) {
            Err(TieredError::Config(message)) => message,
            other => panic!("{url}: expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn other_schemes_name_the_setting_and_the_accepted_forms() {
        for url in [
            "http://bucket",
            "gs://bucket",
            "s3://",
            "file://relative/path",
            "bucket",
        ] {
            let message = config_error(url, &KEYS);
            assert!(message.contains(URL_SETTING), "{message}");
            assert!(message.contains("s3://bucket/prefix"), "{message}");
        }
    }

    #[test]
    fn missing_credentials_are_named_exactly() {
        let message = config_error("s3://b", &[("AWS_SECRET_ACCESS_KEY", "s")]);
        assert!(
            message.starts_with("AWS_ACCESS_KEY_ID not set"),
            "{message}"
        );
        let message = config_error("s3://b", &[("AWS_ACCESS_KEY_ID", "i")]);
        assert!(
            message.starts_with("AWS_SECRET_ACCESS_KEY not set"),
            "{message}"
        );
        let message = config_error("s3://b", &[("AWS_ACCESS_KEY_ID", "")]);
        assert!(
            message.starts_with("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set"),
            "{message}"
        );
    }

    #[test]
    fn plain_http_needs_allow_http() {
        let mut vars = KEYS.to_vec();
        vars.push(("AWS_ENDPOINT_URL", "http://127.0.0.1:8333"));
        let message = config_error("s3://b", &vars);
        assert!(message.contains("AWS_ALLOW_HTTP"), "{message}");
        vars.push(("AWS_ALLOW_HTTP", "true"));
        let target = open("s3://b//some/prefix/", &env_of(&vars)).expect("allowed");
        assert_eq!(target.prefix, "some/prefix");
        assert_eq!(
            target.description,
            "s3://b/some/prefix via http://127.0.0.1:8333"
        );
    }

    #[test]
    fn the_description_holds_no_secret() {
        let mut vars = KEYS.to_vec();
        vars.push(("AWS_ENDPOINT", "https://user:pw@s3.example.com:9000/"));
        vars.push(("AWS_SESSION_TOKEN", "token-secret"));
        let target = open("s3://b", &env_of(&vars)).expect("valid");
        assert_eq!(
            target.description,
            "s3://b via https://s3.example.com:9000/"
        );
        let target = open("s3://b/p", &env_of(&KEYS)).expect("valid");
        assert_eq!(target.description, "s3://b/p via AWS S3 in us-east-1");
    }

    #[test]
    fn a_file_url_makes_its_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("a/b");
        let url = format!("file://{}", root.display());
        let target = open(&url, &env_of(&[])).expect("valid");
        assert!(root.is_dir());
        assert_eq!(target.description, url);
        assert_eq!(target.prefix, "");
    }
}
