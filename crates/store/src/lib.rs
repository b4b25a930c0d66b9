//! Millrace native partitioned segment store. See `API.md` for the contract.
