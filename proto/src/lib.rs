//! Weir's wire protocol: the generated tonic/prost code for `proto/weir.proto`, nothing else.

#![allow(clippy::all, missing_docs)]

/// Version 1 of the protocol.
pub mod v1 {
    tonic::include_proto!("weir.v1");
}

pub use v1::*;
