//! Multi-level arbitration (seed 000 §5.2, §7.3.2): tenants by weighted DRF,
//! applications by priority within their tenant, preemption of lower
//! priorities, and all-or-nothing placement of each application.

pub mod drf;
pub mod gang;
pub mod preemption;
pub mod priority;

pub use drf::{DrfQueue, weighted_share_ppb};
pub use gang::{GangOutcome, GangRequest, PlacedReplica, place_gang};
pub use preemption::{VictimChoice, find_victims};
pub use priority::order_key;
