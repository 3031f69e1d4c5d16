//! Application lifecycle (seed 000 §6): phases, operations, events and the
//! pure transition function.

pub mod event;
pub mod operation;
pub mod state;
pub mod transition;

pub use event::{LifecycleEvent, Target, Trigger};
pub use operation::{Operation, SystemEvent};
pub use state::Phase;
pub use transition::{IllegalTransition, Input, LifecycleAction, Step, transition};
