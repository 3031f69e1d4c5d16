//! The seed concepts as types: applications, workloads, nodes, pools,
//! tenants, policies, resources, QoS classes, failures. One concept per file.

pub mod application;
pub mod config;
pub mod dependency;
pub mod disconnect;
pub mod failure;
pub mod health;
pub mod lifecycle_policy;
pub mod names;
pub mod node;
pub mod policy;
pub mod pool;
pub mod qos;
pub mod ratio;
pub mod resources;
pub mod rollout;
pub mod runtime;
pub mod secret;
pub mod security;
pub mod tenant;
pub mod time;
pub mod workload;
