//! Who may do what (seed 000 §7.4, §11.6, §13.2): principals, the five roles
//! and their bindings, bearer tokens, what each command needs, and the one
//! check every write and read of the control plane goes through. Pure: the
//! agent says who is asking ([`Actor`]); the coordinator decides, with the
//! replicated bindings, and records the decision in the audit log
//! ([`crate::state::audit`]).

pub mod actor;
pub mod binding;
pub mod check;
pub mod need;
pub mod role;
pub mod token;

pub use actor::{Actor, Source};
pub use binding::RoleBinding;
pub use check::{AccessState, Denied};
pub use need::{Need, Scope};
pub use role::{Permission, Role};
pub use token::ApiToken;
