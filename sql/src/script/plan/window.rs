//! Window aggregates: `GROUP BY window_start, window_end` over a window function's rows, or over the rows of
//! another window aggregate (whose windows they keep, as Flink's window properties carry through a query).

use super::*;

/// Per grouping expression of a window aggregate: a part of the key, or what the `window-aggregate`'s output has
/// for it.
enum Grouped {
    Key,
    Window(Expr),
}

/// How a window aggregate's rows are windowed: its grouping, the key's expressions and the windows' config.
pub(super) struct Windowing {
    grouped: Vec<Grouped>,
    keys: Vec<Expr>,
    config: BTreeMap<String, ConfigValue>,
}

impl Job<'_> {
    /// `GROUP BY [column,] window_start, window_end` over a window function's rows, or `GROUP BY [column,]
    /// window_end` over a window aggregate's: a `project` keying the rows by the other columns (its rows'
    /// aggregated column as `value`), and a `window-aggregate`. Its output, as the plan reads it, is expressions
    /// over the `window-aggregate`'s columns.
    pub(super) fn window_aggregate(
        &mut self,
        agg: &datafusion_expr::Aggregate,
        mut c: Collapsed,
        windowing: Windowing,
    ) -> Result<Collapsed, SqlError> {
        let in_schema = agg.input.schema();
        let Windowing { grouped, keys, mut config } = windowing;
        let aggregate = match agg.aggr_expr.as_slice() {
            [] => None,
            [a] => Some(aggregate_call(a, in_schema, "in a window")?),
            _ => return Err(SqlError::plain("more than one aggregate per window is not supported yet")),
        };
        let (aggregate_name, arg, skip_nulls) = match aggregate {
            Some(a) => (a.name, a.arg, a.skip_nulls),
            None => ("count", None, false),
        };
        let value = match &arg {
            Some(a) => substitute(a.clone(), in_schema, &c.exprs)?,
            None => lit(1i64),
        };
        if skip_nulls {
            c.predicate.push(value.clone().is_not_null());
        }
        c.exprs = vec![value];
        config.insert("aggregate".into(), ConfigValue::from(aggregate_name));
        let uid = self.keyed_step("window", c, &["value".to_string()], keys, "window-aggregate", config)?;
        let out_schema = window_aggregate_schema(aggregate_name)?;
        let value_type = out_schema.field_with_unqualified_name("value").map_err(df)?.data_type().clone();
        let key_types: Vec<DataType> = (0..grouped.len())
            .filter(|&i| matches!(grouped[i], Grouped::Key))
            .map(|i| agg.schema.field(i).data_type().clone())
            .collect();
        let mut key_columns = key_columns(&key_types)?.into_iter();
        let mut exprs = Vec::new();
        for (i, field) in agg.schema.fields().iter().enumerate() {
            // The aggregate comes after the grouping expressions.
            let e = match grouped.get(i) {
                Some(Grouped::Key) => {
                    key_columns.next().ok_or_else(|| SqlError::plain("a grouping column without its key part"))?
                }
                Some(Grouped::Window(e)) => e.clone(),
                None => as_planned("value", &value_type, field.data_type()),
            };
            exprs.push(e);
        }
        let input =
            Input::Operator { uid, schema: out_schema, times: vec![("window_end".to_string(), 1)], updating: false };
        Ok(Collapsed { input, window: None, predicate: Vec::new(), exprs })
    }

    /// How a `GROUP BY` over `c` is windowed: by the window function its rows are read through (taken out of
    /// `c`), or by the windows of the window aggregate they are the rows of, where it names their `window_end`;
    /// `None` for an unbounded `GROUP BY`.
    pub(super) fn windowing(
        &self,
        agg: &datafusion_expr::Aggregate,
        c: &mut Collapsed,
    ) -> Result<Option<Windowing>, SqlError> {
        match c.window.take() {
            Some(read) => self.window_function(agg, c, read).map(Some),
            None => inherited(agg, c),
        }
    }

    /// The windowing of a `GROUP BY` over a window function's rows: its descriptor must be the source's event
    /// time, and the grouping must name `window_start` and `window_end`.
    fn window_function(
        &self,
        agg: &datafusion_expr::Aggregate,
        c: &Collapsed,
        read: WindowRead,
    ) -> Result<Windowing, SqlError> {
        let WindowRead { name, time, partition } = read;
        let w = &self.windows[&name];
        let f = w.call.function.name();
        let mut keys: Vec<Expr> = Vec::new();
        let mut grouped: Vec<Grouped> = Vec::new();
        for (g, e) in agg.group_expr.iter().zip(grouping(agg, c)?) {
            match which_window_column(&e) {
                Some("window_time") => grouped.push(Grouped::Window(window_time())),
                Some(wc) => grouped.push(Grouped::Window(col(wc))),
                None if reads_window_column(&e) => {
                    return Err(SqlError::plain(format!(
                        "GROUP BY {g}: an expression of the window is not supported yet"
                    )))
                }
                None => {
                    keys.push(e);
                    grouped.push(Grouped::Key);
                }
            }
        }
        let grouped_by = |n: &str| grouped.iter().any(|g| matches!(g, Grouped::Window(Expr::Column(x)) if x.name == n));
        if !grouped_by("window_start") || !grouped_by("window_end") {
            return Err(SqlError::plain(format!(
                "{f}: a window aggregate groups by window_start and window_end (as Flink requires)"
            )));
        }
        if let Shape::Session { .. } = w.shape {
            let same = partition.len() == keys.len() && partition.iter().all(|p| keys.contains(p));
            if !same {
                return Err(SqlError::plain(
                    "SESSION: Weir's sessions are per GROUP BY column: PARTITION BY the column the query groups by",
                ));
            }
        }
        self.window_read(c, &name, &time)?;
        Ok(Windowing { grouped, keys, config: w.config() })
    }

    /// Checks that `c`'s rows, read through window function `name` of time `time`, are a table's, under no
    /// condition on the window, with the time the table's source stamps its rows with as the descriptor.
    pub(super) fn window_read(&self, c: &Collapsed, name: &str, time: &Expr) -> Result<(), SqlError> {
        let w = &self.windows[name];
        let f = w.call.function.name();
        let Input::Table(table) = &c.input else {
            return Err(SqlError::plain(format!("{f}: a window over aggregated rows is not supported yet")));
        };
        if c.predicate.iter().any(reads_window_column) {
            return Err(SqlError::plain(
                "a condition on window_start, window_end or window_time before the GROUP BY is not supported yet",
            ));
        }
        let t = &self.tables[table];
        let schema = source_schema(t)?;
        let on_source =
            simplified(onto_source(time.clone(), t)?, &schema, &source_guarantees(&c.predicate, t, &schema)?)?;
        match (t.connector.event_time_column(), t.watermark_ms) {
            (Some(et), Some(_)) if on_source == col(et) => Ok(()),
            (_, None) => Err(SqlError::plain(format!(
                "{f}: DESCRIPTOR({}): table {table} has no WATERMARK, so its windows would never end",
                w.call.time_column
            ))),
            _ => Err(SqlError::plain(format!(
                "{f}: DESCRIPTOR({}) is not the time Weir's {table} source stamps its rows with",
                w.call.time_column
            ))),
        }
    }
}

/// The windowing of a `GROUP BY` over a window aggregate's rows that names their `window_end`: the windows are
/// theirs. Those rows' event time is `window_end` − 1, so windows of 1 ms regroup them by `window_end` (and by
/// `window_start` and any other column in the key), whatever their windows' shape; `None` where the grouping does
/// not name such a `window_end`.
fn inherited(agg: &datafusion_expr::Aggregate, c: &Collapsed) -> Result<Option<Windowing>, SqlError> {
    let Input::Operator { times, .. } = &c.input else { return Ok(None) };
    let mut grouped = Vec::new();
    let mut keys = Vec::new();
    for e in grouping(agg, c)? {
        if ends_window(&e, times) {
            grouped.push(Grouped::Window(col("window_end")));
        } else {
            keys.push(e);
            grouped.push(Grouped::Key);
        }
    }
    if keys.len() == grouped.len() {
        return Ok(None);
    }
    Ok(Some(Windowing { grouped, keys, config: instant_windows() }))
}

/// Whether `e` is a window aggregate's `window_end` (of an operator whose rows' times are `times`).
pub(super) fn ends_window(e: &Expr, times: &[(String, i64)]) -> bool {
    matches!(e, Expr::Column(c) if c.relation.is_none() && times.iter().any(|(n, k)| *n == c.name && *k == 1))
}

/// The config of windows of 1 ms: a window per instant, which regroups a window aggregate's rows (at their
/// `window_end` − 1) by their window.
pub(super) fn instant_windows() -> BTreeMap<String, ConfigValue> {
    Shape::Tumbling { size_ms: 1 }.config(0)
}
