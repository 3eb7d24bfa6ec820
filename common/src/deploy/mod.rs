//! What the job manager sends a task manager: the execution graph and the descriptor of one subtask
//! ([`descriptor`]), who restores what when a parallelism changes ([`assignment`]), and the protobuf forms of
//! descriptors and checkpoint handles ([`wire`]).

pub mod assignment;
pub mod descriptor;
pub mod wire;
