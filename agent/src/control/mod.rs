//! The control plane in darosd: the mesh, the raft-replicated coordinator, leader
//! dispatch of node work and the applications API.

pub mod work;
