//! The tumbling windows of `window-join` and `window-top` (`size` ms, no offset): the window a row's time falls
//! in, whether it has fired, and the columns a window's output rows get.

use arrow_array::{ArrayRef, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, TimeUnit};
use std::sync::Arc;

/// The end of the window time `t` falls in, unless the watermark has reached the window's last millisecond
/// (it fired: a row of it is late).
pub(crate) fn open_end(t: i64, size: i64, watermark: i64) -> Option<i64> {
    let end = t.div_euclid(size) * size + size;
    (end - 1 > watermark).then_some(end)
}

/// The window columns as a kind declares them (what [`fields`] are at run time).
pub(crate) fn declared_columns() -> [weir_common::job::schema::Column; 2] {
    use weir_common::job::schema::Column;
    [Column::new("window_start", "timestamp_ms", false), Column::new("window_end", "timestamp_ms", false)]
}

/// The fields of a window's start and end, which its output rows have after their own columns.
pub(crate) fn fields() -> [Field; 2] {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    [Field::new("window_start", ts.clone(), false), Field::new("window_end", ts, false)]
}

/// The window columns of output rows of the windows ending at `ends`: their start, their end, and the rows'
/// event time, the window's last millisecond.
pub(crate) fn columns(ends: &[i64], size: i64) -> [ArrayRef; 3] {
    let column = |at: &dyn Fn(i64) -> i64| -> ArrayRef {
        Arc::new(ends.iter().map(|&end| Some(at(end))).collect::<TimestampMillisecondArray>())
    };
    [column(&|end| end - size), column(&|end| end), column(&|end| end - 1)]
}
