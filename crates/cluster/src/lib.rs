//! millrace-cluster
