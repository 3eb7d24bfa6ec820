//! Rows of two inputs joined, as `join`, `interval-join`, `window-join` and `winning-bids` make them: a joined
//! row is the key, the first input's kept columns, the second's (and any extra columns: a window's start and
//! end), and an event time; [`Plan`] builds that schema once per pair of inputs' columns and applies `where` and
//! `select` to joined rows; [`Pairs`] are the pairs a batch of one input found among the other input's stored
//! rows, and the joined rows they make.

use super::Inputs;
use crate::api::batch::{EVENT_TIME, KEY};
use crate::api::operator::{Collector, OperatorError};
use crate::api::stored_rows::EncodedRows;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, TimestampMillisecondArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;
use weir_sql::expr::{Scalar, SelectItem, SqlExpr};

/// What runs on joined rows of one pair of inputs' kept columns.
pub(crate) struct Plan {
    /// key, the first side's columns, the second's, the extra columns, then the event time.
    pub(crate) joined: SchemaRef,
    condition: Option<Scalar>,
    /// The output columns (`None`: the joined row as it is) and the output schema.
    select: Option<(Vec<Scalar>, SchemaRef)>,
}

/// What a join makes of its pairs: the condition they must meet and the output columns (`None`: the joined row
/// as it is), as the kind's config gives them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Shape<'a> {
    /// The output columns.
    pub(crate) select: Option<&'a [SelectItem]>,
    /// Joined rows where this is not true are dropped.
    pub(crate) condition: Option<&'a SqlExpr>,
}

impl Plan {
    /// The plan for rows of `a` joined with rows of `b` (each its kept columns, the event time among them), with
    /// `extra` columns after both sides'.
    pub(crate) fn new(cfg: Shape<'_>, a: &SchemaRef, b: &SchemaRef, extra: &[Field]) -> Result<Plan, OperatorError> {
        let own = |s: &SchemaRef| s.fields().iter().filter(|f| f.name() != EVENT_TIME).cloned().collect::<Vec<_>>();
        let mut fields = vec![Arc::new(Field::new(KEY, DataType::Binary, false))];
        fields.extend(own(a));
        for f in own(b).into_iter().chain(extra.iter().cloned().map(Arc::new)) {
            if fields.iter().any(|g| g.name() == f.name()) {
                return Err(OperatorError::Records(format!(
                    "both inputs have a column {:?}: rename it on one side (a project before the join)",
                    f.name()
                )));
            }
            fields.push(f);
        }
        fields.push(Arc::new(crate::api::batch::event_time_field()));
        let joined: SchemaRef = Arc::new(Schema::new(fields));
        let compiled = |field: &str, e: &SqlExpr| {
            weir_sql::expr::compile_column(e, &joined)
                .map_err(|err| OperatorError::Records(format!("config.{field}: {err}")))
        };
        let condition = match cfg.condition {
            Some(c) => Some(
                weir_sql::expr::compile_condition(c, &joined)
                    .map_err(|err| OperatorError::Records(format!("config.where: {err}")))?,
            ),
            None => None,
        };
        let select = match cfg.select {
            None => None,
            Some(items) => {
                let mut exprs = Vec::new();
                let mut out = Vec::new();
                for item in items {
                    let named: Vec<(SqlExpr, String)> = match item {
                        SelectItem::Star => joined
                            .fields()
                            .iter()
                            .filter(|f| !f.name().starts_with('_'))
                            .map(|f| (SqlExpr::column(f.name()), f.name().clone()))
                            .collect(),
                        SelectItem::Expr { expr, name } => vec![(expr.clone(), name.clone())],
                    };
                    for (e, name) in named {
                        let c = compiled("select", &e).map_err(|err| {
                            OperatorError::Records(format!(
                                "{name}: {}",
                                err.to_string().replace("config.select: ", "")
                            ))
                        })?;
                        out.push(Field::new(&name, c.data_type().clone(), c.nullable()));
                        exprs.push(c);
                    }
                }
                out.push(crate::api::batch::event_time_field());
                Some((exprs, Arc::new(Schema::new(out))))
            }
        };
        Ok(Plan { joined, condition, select })
    }

    /// The output of joined rows (of [`Plan::joined`]): those the condition keeps, with the selected columns.
    pub(crate) fn apply(&self, joined: RecordBatch) -> Result<Option<RecordBatch>, OperatorError> {
        self.apply_tracking(joined, None)
    }

    /// As [`Plan::apply`], and `origin` (if given) gets the joined row each output row comes from.
    pub(crate) fn apply_tracking(
        &self,
        joined: RecordBatch,
        origin: Option<&mut Vec<u32>>,
    ) -> Result<Option<RecordBatch>, OperatorError> {
        let joined = match &self.condition {
            None => {
                if let Some(o) = origin {
                    o.clear();
                    o.extend(0..joined.num_rows() as u32);
                }
                joined
            }
            Some(c) => {
                let mask = c.evaluate_condition(&joined).map_err(|e| OperatorError::Records(e.to_string()))?;
                let mask = &mask;
                if let Some(o) = origin {
                    o.clear();
                    o.extend((0..mask.len()).filter(|&i| mask.is_valid(i) && mask.value(i)).map(|i| i as u32));
                }
                arrow_select::filter::filter_record_batch(&joined, mask)
                    .map_err(|e| OperatorError::Records(format!("filtering joined rows: {e}")))?
            }
        };
        if joined.num_rows() == 0 {
            return Ok(None);
        }
        Ok(Some(match &self.select {
            None => joined,
            Some((exprs, schema)) => {
                let mut cols = exprs
                    .iter()
                    .map(|e| e.evaluate(&joined).map_err(|e| OperatorError::Records(e.to_string())))
                    .collect::<Result<Vec<_>, _>>()?;
                cols.push(joined.column(joined.num_columns() - 1).clone());
                RecordBatch::try_new(schema.clone(), cols)
                    .map_err(|e| OperatorError::Records(format!("building the selected columns: {e}")))?
            }
        }))
    }
}

/// The pairs found while a batch of one input is processed: the batch's row and one of the other input's stored
/// rows (as `api::stored_rows` writes them, each kept once however many pairs it is in), and the joined rows
/// they make.
#[derive(Default)]
pub(crate) struct Pairs {
    rows: Vec<u32>,
    others: Vec<u32>,
    stored: EncodedRows,
}

impl Pairs {
    /// Forgets the pairs (keeping the buffers).
    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.others.clear();
        self.stored.clear();
    }

    /// Keeps a stored row of the other input; returns its number for [`Pairs::push`].
    pub(crate) fn store(&mut self, other: &[u8]) -> u32 {
        self.stored.push(other);
        self.stored.len() as u32 - 1
    }

    /// How many stored rows are kept.
    pub(crate) fn stored(&self) -> usize {
        self.stored.len()
    }

    /// Adds the pair of the batch's row `row` and the kept stored row number `other`.
    pub(crate) fn push(&mut self, row: u32, other: u32) {
        self.rows.push(row);
        self.others.push(other);
    }

    /// Whether there is no pair.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The output of the pairs of a batch of input `s` (its `keys` and kept columns `own`), both inputs' kept
    /// columns being `schemas`: the joined rows (the key, the first input's columns, the second's, the later
    /// event time) through `plan`.
    pub(crate) fn joined(
        &mut self,
        plan: &Plan,
        s: usize,
        keys: &BinaryArray,
        own: &[ArrayRef],
        schemas: [&SchemaRef; 2],
    ) -> Result<Option<RecordBatch>, OperatorError> {
        let (my_schema, their_schema) = (schemas[s], schemas[1 - s]);
        let err = |e: arrow_schema::ArrowError| OperatorError::Records(e.to_string());
        // Each stored row decoded once, then repeated for its pairs.
        let stored = self.stored.decode(their_schema)?;
        let others = UInt32Array::from(std::mem::take(&mut self.others));
        let theirs_cols: Vec<ArrayRef> = stored
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), &others, None))
            .collect::<Result<_, _>>()
            .map_err(err)?;
        self.others = others.into_parts().1.into_inner().into_vec().unwrap_or_default();
        let picks = UInt32Array::from(std::mem::take(&mut self.rows));
        let take = |a: &ArrayRef| arrow_select::take::take(a.as_ref(), &picks, None);
        let mine_cols: Vec<ArrayRef> = own.iter().map(take).collect::<Result<_, _>>().map_err(err)?;
        let key = take(&(Arc::new(keys.clone()) as ArrayRef)).map_err(err)?;
        self.rows = picks.into_parts().1.into_inner().into_vec().unwrap_or_default();
        let (first, first_schema, second, second_schema) = match s {
            0 => (&mine_cols, my_schema, &theirs_cols, their_schema),
            _ => (&theirs_cols, their_schema, &mine_cols, my_schema),
        };
        let mut columns = vec![key];
        let mut times: Vec<&TimestampMillisecondArray> = Vec::with_capacity(2);
        for (cols, schema) in [(first, first_schema), (second, second_schema)] {
            for (c, f) in cols.iter().zip(schema.fields()) {
                if f.name() == EVENT_TIME {
                    times.push(c.as_primitive::<TimestampMillisecondType>());
                } else {
                    columns.push(c.clone());
                }
            }
        }
        columns.push(Arc::new(later(&times)));
        let joined = RecordBatch::try_new(plan.joined.clone(), columns)
            .map_err(|e| OperatorError::Records(format!("building joined rows: {e}")))?;
        plan.apply(joined)
    }
}

/// Row by row, the later of the event times (null where all are null).
pub(crate) fn later(times: &[&TimestampMillisecondArray]) -> TimestampMillisecondArray {
    let n = times.first().map_or(0, |t| t.len());
    (0..n).map(|i| times.iter().filter(|t| t.is_valid(i)).map(|t| t.value(i)).max()).collect()
}

impl Pairs {
    /// Emits the joined rows of the pairs a batch of input `s` found (its `keys` and kept columns `own`), through
    /// the plan `inputs` built for `cfg`'s `where` and `select` over both inputs' kept columns.
    pub(crate) fn emit(
        &mut self,
        inputs: &mut Inputs<Plan>,
        cfg: Shape<'_>,
        s: usize,
        keys: &BinaryArray,
        own: &[ArrayRef],
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if self.is_empty() {
            return Ok(());
        }
        let (a, b) = (inputs.stored(0)?, inputs.stored(1)?);
        let plan = inputs.built(|kept| Plan::new(cfg, &kept[0], &kept[1], &[]))?;
        match self.joined(plan, s, keys, own, [&a, &b])? {
            Some(result) => out.emit_batch(result),
            None => Ok(()),
        }
    }
}
