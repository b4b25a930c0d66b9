//! The frame every v3 answer shares (Confluent's `Resource` and `ResourceCollection`): a `kind`
//! (`KafkaTopic`, `KafkaTopicList`, …), `metadata` with the resource's own URL (`self`) and, for
//! single resources, its Confluent resource name (`crn:///kafka=<cluster>/topic=<topic>`), and
//! `related` links to the resources next to it. Collections have no pages: `next` is always null.

use serde::Serialize;

/// A single resource's `metadata`.
#[derive(Debug, Serialize)]
pub struct Metadata {
    #[serde(rename = "self")]
    pub self_url: String,
    pub resource_name: String,
}

impl Metadata {
    /// `self_url`, and the CRN of `path`'s `(type, name)` pairs below the cluster.
    pub fn new(self_url: String, cluster_id: &str, path: &[(&str, &str)]) -> Self {
        Self {
            self_url,
            resource_name: crn(cluster_id, path),
        }
    }
}

/// A link to a related resource or collection.
#[derive(Debug, Serialize)]
pub struct Related {
    pub related: String,
}

impl Related {
    pub fn to(url: String) -> Self {
        Self { related: url }
    }
}

/// A collection's `metadata`.
#[derive(Debug, Serialize)]
pub struct CollectionMetadata {
    #[serde(rename = "self")]
    pub self_url: String,
    /// The next page; v3 collections here are answered whole.
    pub next: Option<String>,
}

/// A collection: `kind`, `metadata`, `data`.
#[derive(Debug, Serialize)]
pub struct Collection<T> {
    pub kind: &'static str,
    pub metadata: CollectionMetadata,
    pub data: Vec<T>,
}

impl<T> Collection<T> {
    pub fn new(kind: &'static str, self_url: String, data: Vec<T>) -> Self {
        Self {
            kind,
            metadata: CollectionMetadata {
                self_url,
                next: None,
            },
            data,
        }
    }
}

/// Confluent's resource name: `crn:///kafka=<cluster>` then `/<type>=<name>` for each pair.
pub fn crn(cluster_id: &str, path: &[(&str, &str)]) -> String {
    let mut out = format!("crn:///kafka={cluster_id}");
    for (kind, name) in path {
        out.push('/');
        out.push_str(kind);
        out.push('=');
        out.push_str(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::crn;

    #[test]
    fn resource_names_nest_below_the_cluster() {
        assert_eq!(crn("c", &[]), "crn:///kafka=c");
        assert_eq!(
            crn("c", &[("topic", "t"), ("partition", "0")]),
            "crn:///kafka=c/topic=t/partition=0"
        );
    }
}
