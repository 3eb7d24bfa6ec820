//! A keyed snapshot once its backend has taken it: the formats its files may have ([`format`](mod@format)), the
//! backend-independent canonical format and the conversion into it ([`canonical`]), and its way to and from the
//! object store ([`transfer`]).

pub mod canonical;
pub mod format;
pub mod transfer;

pub use transfer::{download_keyed, is_shareable, local_name, shareable_files, upload_keyed, upload_keyed_incremental};
