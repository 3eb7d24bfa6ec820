//! Opening a keyed backend, fresh or restored from snapshots of any format and key-group range, as a subtask
//! does when it starts and when a job rescales ([`rescale`]).

pub mod rescale;
