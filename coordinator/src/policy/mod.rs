//! Policies: resolution across scopes and evaluation records.

pub mod record;
pub mod resolve;
pub mod security;

pub use record::{PolicyCheck, PolicyEvaluation};
pub use resolve::{EffectivePolicy, PolicyConflict, Resolution, ScopedPolicy, resolve};
