//! millrace-frontend
