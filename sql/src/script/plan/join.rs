//! Joins: regular joins, and interval joins where both sides' event times bound each other.

use super::*;

impl Job<'_> {
    /// An inner join on equal columns: each side a `project` keyed by its side of the equalities, and a `join`
    /// (every row of both sides in keyed state, as Flink's regular join keeps them). The joined row's columns are
    /// named after the side's table or alias and the column (`A.id`), so that both sides' columns are distinct.
    pub(super) fn join(&mut self, j: &datafusion_expr::logical_plan::Join) -> Result<Collapsed, SqlError> {
        if j.join_type != datafusion_common::JoinType::Inner {
            return Err(SqlError::plain(format!(
                "{} joins are not supported yet (inner joins are)",
                j.join_type.to_string().to_uppercase()
            )));
        }
        if let Some(top) = self.window_top(j)? {
            return Ok(top);
        }
        if j.on.is_empty() {
            return Err(SqlError::plain("a join without an equality between its two sides is not supported yet"));
        }
        let mut inputs = Vec::new();
        let mut fields = vec![Field::new("key", DataType::Binary, false)];
        let mut times: HashMap<String, (usize, i64)> = HashMap::new();
        for (side, input) in [&j.left, &j.right].into_iter().enumerate() {
            let c = self.collapse(input)?;
            if c.input.updating() {
                return Err(SqlError::plain(
                    "a join of an updating table (the result of a GROUP BY without a window) is not supported yet",
                ));
            }
            let schema = input.schema();
            let names: Vec<String> = schema.iter().map(|(q, f)| joined_name(q, f.name())).collect();
            for (i, k) in self.event_times(&c)? {
                times.insert(names[i].clone(), (side, k));
            }
            for ((_, f), name) in schema.iter().zip(&names) {
                if fields.iter().any(|x| x.name() == name) {
                    return Err(SqlError::plain(format!("the join reads two columns called {name}: alias a side")));
                }
                fields.push(Field::new(name, f.data_type().clone(), true));
            }
            let keys: Vec<Expr> =
                j.on.iter()
                    .map(|(l, r)| if side == 0 { l } else { r })
                    .map(|e| substitute(e.clone().unalias_nested().data, schema, &c.exprs))
                    .collect::<Result<_, _>>()?;
            let uid = self.fresh_uid(format!("{}.join-{}", self.sink, ["left", "right"][side]));
            inputs.push(self.project(&uid, c, &names, Some(keys))?);
        }
        let joined: Vec<Expr> = j.schema.iter().map(|(q, f)| plain_column(joined_name(q, f.name()))).collect();
        let mut config = BTreeMap::new();
        let condition = match &j.filter {
            Some(f) => Some(substitute(f.clone().unalias_nested().data, &j.schema, &joined)?),
            None => None,
        };
        let mut rest = Vec::new();
        let (mut lower, mut upper) = (None::<i64>, None::<i64>);
        let mut bound = |bounds: Vec<(bool, i64)>| {
            for (is_lower, v) in bounds {
                if is_lower {
                    lower = Some(lower.map_or(v, |l| l.max(v)));
                } else {
                    upper = Some(upper.map_or(v, |u| u.min(v)));
                }
            }
        };
        // An equality of the two sides' times (two windowed tables joined on window_end) bounds them too, and
        // stays a key.
        let on_joined = |e: &Expr| substitute(e.clone().unalias_nested().data, &j.schema, &joined);
        for (l, r) in &j.on {
            bound(time_bounds(&on_joined(l)?.eq(on_joined(r)?), &times));
        }
        if let Some(e) = &condition {
            for part in split_conjunction(e) {
                let bounds = time_bounds(part, &times);
                if bounds.is_empty() {
                    rest.push(part.clone());
                }
                bound(bounds);
            }
        }
        // Both sides' times bounded against each other: Flink's interval join, whose rows leave its state once the
        // watermark has passed the last time they could match. Else a regular join, which keeps every row.
        let (kind, condition) = match (lower, upper) {
            (Some(l), Some(u)) => {
                config.insert("lower_ms".to_string(), ConfigValue::from(l));
                config.insert("upper_ms".to_string(), ConfigValue::from(u));
                ("interval-join", conjunction(rest))
            }
            _ => ("join", condition),
        };
        if let Some(e) = condition {
            let text = sql_text(&e)?;
            crate::expr::parse_expr(&text).map_err(|e| SqlError::plain(format!("the join condition: {e}")))?;
            config.insert("where".to_string(), ConfigValue::from(text));
        }
        let uid = self.fresh_uid(format!("{}.join", self.sink));
        let mut op = operator(&uid, kind, None, config);
        op.inputs = Some(inputs);
        let uid = self.add(op);
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times: Vec::new(), updating: false };
        Ok(Collapsed { input, window: None, predicate: Vec::new(), exprs: joined })
    }

    /// The output expressions of `c` that are the row's event time plus so many ms: their index and the ms.
    pub(super) fn event_times(&self, c: &Collapsed) -> Result<Vec<(usize, i64)>, SqlError> {
        match &c.input {
            Input::Operator { times, .. } => Ok(c
                .exprs
                .iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    // A time column, or one shifted by an interval (`window_time` is `window_end` − 1 ms).
                    let (name, shift) = shifted_column(e)?;
                    let (_, k) = times.iter().find(|(n, _)| n == name)?;
                    Some((i, k.checked_add(shift)?))
                })
                .collect()),
            Input::Table(table) => {
                let t = &self.tables[table];
                let Some(et) = t.connector.event_time_column() else { return Ok(Vec::new()) };
                let schema = source_schema(t)?;
                let guarantees = source_guarantees(&c.predicate, t, &schema)?;
                let mut out = Vec::new();
                for (i, e) in c.exprs.iter().enumerate() {
                    if !reads_window_column(e)
                        && simplified(onto_source(e.clone(), t)?, &schema, &guarantees)? == col(et)
                    {
                        out.push((i, 0));
                    }
                }
                Ok(out)
            }
        }
    }
}

/// `column ± interval` as the column and the ms added.
fn shifted_column(e: &Expr) -> Option<(&str, i64)> {
    match e {
        Expr::Column(c) if c.relation.is_none() => Some((c.name.as_str(), 0)),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if matches!(op, Operator::Plus | Operator::Minus) => {
            let (name, k) = shifted_column(left)?;
            let ms = interval_ms(right)?;
            Some((name, if *op == Operator::Plus { k.checked_add(ms)? } else { k.checked_sub(ms)? }))
        }
        _ => None,
    }
}

/// What a condition says of the second side's event time less the first's (`d`), where it compares the two
/// sides' times (`times`: a joined column's side and its offset from its row's time): `(true, v)` for `d >= v`,
/// `(false, v)` for `d <= v`. Nothing for any other condition.
fn time_bounds(e: &Expr, times: &HashMap<String, (usize, i64)>) -> Vec<(bool, i64)> {
    // `a op b` with a = t_a + ka, b = t_b + kb.
    let compare = |a: &Expr, op: Operator, b: &Expr| -> Option<(bool, i64)> {
        let (na, sa) = shifted_column(a)?;
        let (nb, sb) = shifted_column(b)?;
        let (&(side_a, ka), &(side_b, kb)) = (times.get(na)?, times.get(nb)?);
        if side_a == side_b {
            return None;
        }
        // t_a + ca op t_b + cb.
        let (ca, cb) = (ka.checked_add(sa)?, kb.checked_add(sb)?);
        // As d = t_second − t_first: with a the first, `t_a + ca op t_b + cb` is `d op' ca − cb` with op flipped.
        let (op, v) = if side_a == 0 { (op.swap()?, ca.checked_sub(cb)?) } else { (op, cb.checked_sub(ca)?) };
        match op {
            Operator::GtEq => Some((true, v)),
            Operator::Gt => Some((true, v.checked_add(1)?)),
            Operator::LtEq => Some((false, v)),
            Operator::Lt => Some((false, v.checked_sub(1)?)),
            _ => None,
        }
    };
    match e {
        Expr::Between(b) if !b.negated => {
            match (compare(&b.expr, Operator::GtEq, &b.low), compare(&b.expr, Operator::LtEq, &b.high)) {
                (Some(l), Some(h)) => vec![l, h],
                _ => Vec::new(),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => {
            match (compare(left, Operator::GtEq, right), compare(left, Operator::LtEq, right)) {
                (Some(l), Some(h)) => vec![l, h],
                _ => Vec::new(),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => compare(left, *op, right).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A column's name in a joined row: its table's (or alias's) name and its own, `A.id`.
fn joined_name(qualifier: Option<&datafusion_common::TableReference>, name: &str) -> String {
    match qualifier {
        Some(q) => format!("{}.{name}", q.table()),
        None => name.to_string(),
    }
}
