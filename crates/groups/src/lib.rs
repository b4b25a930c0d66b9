//! millrace-groups
