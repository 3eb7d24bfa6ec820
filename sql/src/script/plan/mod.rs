//! A script's statements to a Weir job: DataFusion plans the tables, views and the `INSERT` (names resolved,
//! types coerced, the sink's casts added), and its logical plan is rewritten into Weir operator kinds — a source
//! per table read, a `project` for the projections and filters over it (its expressions rewritten onto the
//! source kind's columns, simplified under what the filter guarantees, and written back as SQL text, which the
//! task managers compile with the same engine), and the sink.

use super::connectors::{ConfigValue, Connector, Mapped};
use super::error::SqlError;
use super::settings::Settings;
use super::statements::{Stmt, TableDdl, WindowCall};
use super::windows::{
    aggregate_call, group_windows, interval_ms, key_columns, reads_window_column, which_window_column,
    window_aggregate_schema, window_column, window_table, window_time, AggregateCall, Shape, WindowTable,
    WINDOW_COLUMNS,
};
use crate::expr::context::{Catalog, Functions};
use crate::expr::types::column_type;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::interval_arithmetic::NullableInterval;
use datafusion_expr::logical_plan::builder::LogicalTableSource;
use datafusion_expr::simplify::SimplifyContext;
use datafusion_expr::utils::{conjunction, split_conjunction};
use datafusion_expr::{col, lit, when, BinaryExpr, Expr, LogicalPlan, Operator, TableSource, WriteOp};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate;
use datafusion_optimizer::optimize_projections::OptimizeProjections;
use datafusion_optimizer::push_down_filter::PushDownFilter;
use datafusion_optimizer::simplify_expressions::ExprSimplifier;
use datafusion_optimizer::{Optimizer, OptimizerContext};
use datafusion_sql::planner::{PlannerContext, SqlToRel};
use sqlparser::ast::Statement;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_common::job::spec::{JobSpecFile, OperatorFile};
use weir_common::job::watermarks::WatermarksFile;

mod group;
mod join;
mod over;
mod rank;
mod top;
mod window;

/// A table of the script.
struct Table {
    /// Its columns, the computed ones last.
    schema: SchemaRef,
    /// Each computed column's expression, over the table's other columns.
    computed: HashMap<String, Expr>,
    /// The watermark's bound: `WATERMARK FOR c AS c - INTERVAL …`, in ms.
    watermark_ms: Option<i64>,
    connector: Connector,
}

/// A view: its plan, which DataFusion inlines where the view is read.
#[derive(Debug)]
struct View {
    plan: LogicalPlan,
    schema: SchemaRef,
}

impl TableSource for View {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn get_logical_plan(&self) -> Option<Cow<'_, LogicalPlan>> {
        Some(Cow::Borrowed(&self.plan))
    }
}

/// One operator of the planned job, as `weir sql explain` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// The job spec.
    pub spec: JobSpecFile,
    /// Settings Weir accepted and does not act on.
    pub warnings: Vec<String>,
}

/// How a job is planned beyond what the script says.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// The job's name when the script sets none (`pipeline.name`).
    pub name: String,
    /// The parallelism a submission asks for (`--parallelism`), over the script's.
    pub parallelism: Option<u32>,
}

fn df(e: datafusion_common::DataFusionError) -> SqlError {
    SqlError::from(e)
}

/// Plans a script's statements into a job.
pub(crate) fn plan(stmts: Vec<Stmt>, options: &PlanOptions) -> Result<Planned, SqlError> {
    let functions = Functions::shared();
    let mut catalog = Catalog::functions_only(functions);
    let mut tables: HashMap<String, Table> = HashMap::new();
    let mut settings = Settings::default();
    let mut windows: HashMap<String, WindowTable> = HashMap::new();
    let mut views: HashMap<String, LogicalPlan> = HashMap::new();
    let mut insert: Option<(Statement, Vec<WindowCall>, sqlparser::tokenizer::Location)> = None;
    for s in stmts {
        match s {
            Stmt::Set { key, value, at } => settings.set(&key, &value).map_err(|e| e.located(at))?,
            Stmt::CreateTable(ddl) => {
                let at = ddl.at;
                let name = ddl.name.clone();
                if tables.contains_key(&name) {
                    return Err(SqlError::at(at, format!("table {name} is created twice")));
                }
                let table = table(&catalog, *ddl).map_err(|e| e.located(at))?;
                catalog.add_table(&name, Arc::new(LogicalTableSource::new(table.schema.clone())));
                tables.insert(name, table);
            }
            Stmt::CreateView { statement, windows: calls, at } => {
                let Statement::CreateView(v) = *statement else {
                    return Err(SqlError::at(at, "expected CREATE VIEW name AS query"));
                };
                let name = v.name.to_string();
                let (plan, analyzed) =
                    plan_statement(&mut catalog, &mut windows, Statement::Query(v.query), calls, at)?;
                let schema = Arc::new(plan.schema().as_arrow().clone());
                // Type-coerced as the INSERT's plan is, for a window function reading the view.
                views.insert(name.clone(), analyzed);
                catalog.add_table(&name, Arc::new(View { plan, schema }));
            }
            Stmt::Insert { statement, windows: calls, at } => {
                if insert.is_some() {
                    return Err(SqlError::at(at, "a script has one INSERT INTO (a job writes one table)"));
                }
                insert = Some((*statement, calls, at));
            }
        }
    }
    let Some((statement, calls, at)) = insert else {
        return Err(SqlError::plain("the script has no INSERT INTO … SELECT: nothing would run"));
    };
    let (_, plan) = plan_statement(&mut catalog, &mut windows, statement, calls, at)?;
    // A join's equalities become its keys; conditions over its result that read one side are applied to that side
    // before the join (Flink does the same): fewer rows are kept in the join's state.
    // And only the columns read later are kept: a join stores what its sides' projects select.
    let pushdown = Optimizer::with_rules(vec![
        Arc::new(ExtractEquijoinPredicate::new()),
        Arc::new(PushDownFilter::new()),
        Arc::new(OptimizeProjections::new()),
    ]);
    let plan = pushdown.optimize(plan, &OptimizerContext::new(), |_, _| {}).map_err(|e| df(e).located(at))?;
    let parallelism = options.parallelism.or(settings.parallelism);
    let mut job = Job {
        tables: &tables,
        windows: &windows,
        views: &views,
        ops: Vec::new(),
        sources: HashMap::new(),
        parallelism,
        sink: String::new(),
    };
    job.insert(&plan).map_err(|e| e.located(at))?;
    let mut spec = JobSpecFile { name: options.name.clone(), operators: job.ops, ..JobSpecFile::default() };
    settings.apply(&mut spec);
    if let Some(p) = options.parallelism {
        spec.parallelism = Some(p);
    }
    let warnings = settings.ignored.iter().map(|k| format!("SET '{k}' is Flink's tuning: Weir ignores it")).collect();
    Ok(Planned { spec, warnings })
}

/// A statement (a view's query or the `INSERT`) planned by DataFusion once its window functions (`calls`, and
/// the legacy group windows it holds) are tables of the catalog: the plan as written, and type-coerced.
fn plan_statement(
    catalog: &mut Catalog<'_>,
    windows: &mut HashMap<String, WindowTable>,
    mut statement: Statement,
    mut calls: Vec<WindowCall>,
    at: sqlparser::tokenizer::Location,
) -> Result<(LogicalPlan, LogicalPlan), SqlError> {
    let functions = Functions::shared();
    calls.extend(group_windows(&mut statement).map_err(|e| e.located(at))?);
    add_windows(catalog, windows, calls)?;
    crate::expr::compile::flink_statement(&mut statement);
    let planner = SqlToRel::new_with_options(&*catalog, functions.parser_options());
    let plan = planner.sql_statement_to_plan(statement).map_err(|e| df(e).located(at))?;
    let analyzed = Analyzer::new()
        .execute_and_check(plan.clone(), functions.options(), |_, _| {})
        .map_err(|e| df(e).located(at))?;
    Ok((plan, analyzed))
}

/// Resolves the window functions a statement calls, each a table its query may read.
fn add_windows(
    catalog: &mut Catalog<'_>,
    windows: &mut HashMap<String, WindowTable>,
    calls: Vec<WindowCall>,
) -> Result<(), SqlError> {
    for call in calls {
        let at = call.at;
        let w = window_table(catalog, call).map_err(|e| e.located(at))?;
        catalog.add_table(&w.call.name, Arc::new(LogicalTableSource::new(w.schema.clone())));
        windows.insert(w.call.name.clone(), w);
    }
    Ok(())
}

/// A `CREATE TABLE`'s schema (computed columns typed over the others), watermark and connector.
fn table(catalog: &Catalog<'_>, ddl: TableDdl) -> Result<Table, SqlError> {
    let functions = Functions::shared();
    let planner = SqlToRel::new_with_options(catalog, functions.parser_options());
    let Statement::CreateTable(create) = ddl.create else {
        return Err(SqlError::plain("expected CREATE TABLE"));
    };
    let base = planner.build_schema(create.columns).map_err(df)?;
    let base = Schema::new(
        base.fields().iter().map(|f| Field::new(f.name(), millis(f.data_type()), f.is_nullable())).collect::<Vec<_>>(),
    );
    let options: Vec<(String, String)> = ddl.options.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect();
    let connector = Connector::from_options(&ddl.name, &options)?;
    connector.check_source_columns(&ddl.name, &base)?;
    let qualified = DFSchema::try_from_qualified_schema(ddl.name.as_str(), &base).map_err(df)?;
    let mut fields: Vec<Field> = base.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut computed = HashMap::new();
    for (name, mut ast, at) in ddl.computed {
        crate::expr::compile::flink_to_datafusion(&mut ast);
        let e = planner.sql_to_expr(ast, &qualified, &mut PlannerContext::new()).map_err(|e| df(e).located(at))?;
        let (_, field) = datafusion_expr::ExprSchemable::to_field(&e, &qualified).map_err(df)?;
        if fields.iter().any(|f| f.name() == &name) {
            return Err(SqlError::at(at, format!("column {name} is declared twice")));
        }
        fields.push(Field::new(&name, field.data_type().clone(), field.is_nullable()));
        computed.insert(name, e);
    }
    let schema = Arc::new(Schema::new(fields));
    let watermark_ms = match ddl.watermark {
        None => None,
        Some((column, ast, at)) => {
            Some(watermark(&planner, &schema, &ddl.name, &column, ast).map_err(|e| e.located(at))?)
        }
    };
    Ok(Table { schema, computed, watermark_ms, connector })
}

/// Weir's event times and timestamp columns are milliseconds: `TIMESTAMP(3)` is what a table declares, and a
/// `TIMESTAMP` of another precision is read as milliseconds too.
fn millis(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, None) => DataType::Timestamp(TimeUnit::Millisecond, None),
        DataType::Struct(fields) => DataType::Struct(
            fields.iter().map(|f| Arc::new(Field::new(f.name(), millis(f.data_type()), f.is_nullable()))).collect(),
        ),
        other => other.clone(),
    }
}

/// `WATERMARK FOR column AS column - INTERVAL …`: the bound, in ms.
fn watermark(
    planner: &SqlToRel<'_, Catalog<'_>>,
    schema: &Schema,
    table: &str,
    column: &str,
    ast: sqlparser::ast::Expr,
) -> Result<i64, SqlError> {
    let Ok(field) = schema.field_with_name(column) else {
        return Err(SqlError::plain(format!("WATERMARK FOR {column}: table {table} has no column {column}")));
    };
    if !matches!(field.data_type(), DataType::Timestamp(TimeUnit::Millisecond, None)) {
        return Err(SqlError::plain(format!(
            "WATERMARK FOR {column}: the column is {}, not a TIMESTAMP(3)",
            field.data_type()
        )));
    }
    let dfs = DFSchema::try_from(schema.clone()).map_err(df)?;
    let e = planner.sql_to_expr(ast, &dfs, &mut PlannerContext::new()).map_err(df)?;
    let refuse = || {
        SqlError::plain(format!(
            "WATERMARK FOR {column}: Weir reads `{column} - INTERVAL 'n' SECOND` (a bounded delay of at least 1 ms)"
        ))
    };
    let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Minus, right }) = e else { return Err(refuse()) };
    if !matches!(left.as_ref(), Expr::Column(c) if c.name == column) {
        return Err(refuse());
    }
    let ms = interval_ms(&right).ok_or_else(refuse)?;
    if ms < 1 {
        return Err(refuse());
    }
    // Flink's watermark is the largest time less the delay; Weir's bounded out-of-orderness one less than that.
    Ok(ms - 1)
}

/// The rows a collapsed part of the plan reads.
#[derive(Clone)]
enum Input {
    /// A table's source.
    Table(String),
    /// An operator's output, of these columns; `times` name the columns that are the row's event time plus so
    /// many ms (a window aggregate's `window_end` is its row's time + 1); `updating`: a changelog (`+I`, `-U`,
    /// `+U`, `-D`), as an unbounded `GROUP BY` gives.
    Operator { uid: String, schema: Arc<DFSchema>, times: Vec<(String, i64)>, updating: bool },
}

impl Input {
    /// Whether its rows are a changelog.
    fn updating(&self) -> bool {
        matches!(self, Input::Operator { updating: true, .. })
    }
}

/// A read through a window function.
struct WindowRead {
    /// The name standing for the call.
    name: String,
    /// Its time column, over the table's columns.
    time: Expr,
    /// `SESSION`'s `PARTITION BY` columns, over the table's columns.
    partition: Vec<Expr>,
}

/// Projections and filters over one input, as one `project`.
struct Collapsed {
    input: Input,
    /// The window function the rows were read through (its window columns are [`window_column`]s in `exprs`).
    window: Option<WindowRead>,
    /// The conditions rows must meet, over the input's columns.
    predicate: Vec<Expr>,
    /// The output columns, over the input's columns.
    exprs: Vec<Expr>,
}

/// The job being built.
struct Job<'t> {
    tables: &'t HashMap<String, Table>,
    /// The window functions the query reads, by the name standing for each.
    windows: &'t HashMap<String, WindowTable>,
    /// The views' plans, by name.
    views: &'t HashMap<String, LogicalPlan>,
    ops: Vec<OperatorFile>,
    /// The uid of each table's source, once made.
    sources: HashMap<String, String>,
    parallelism: Option<u32>,
    /// The sink's table: the prefix of the uids.
    sink: String,
}

fn operator(uid: &str, kind: &str, input: Option<&str>, config: BTreeMap<String, ConfigValue>) -> OperatorFile {
    OperatorFile {
        uid: uid.into(),
        kind: kind.into(),
        config,
        input: input.map(str::to_string),
        ..OperatorFile::default()
    }
}

/// What a plan node is, in words a SQL user knows, for "not supported yet".
fn feature(plan: &LogicalPlan) -> String {
    match plan {
        LogicalPlan::Aggregate(_) => "GROUP BY and aggregate functions".into(),
        LogicalPlan::Join(_) => "joins".into(),
        LogicalPlan::Window(_) => "OVER windows".into(),
        LogicalPlan::Sort(_) => "ORDER BY".into(),
        LogicalPlan::Limit(_) => "LIMIT".into(),
        LogicalPlan::Union(_) => "UNION".into(),
        LogicalPlan::Distinct(_) => "DISTINCT".into(),
        LogicalPlan::Values(_) => "VALUES".into(),
        LogicalPlan::EmptyRelation(_) => "a SELECT without FROM".into(),
        LogicalPlan::Subquery(_) => "subqueries".into(),
        LogicalPlan::Unnest(_) => "UNNEST".into(),
        other => format!("{} nodes", other.display()),
    }
}

impl<'t> Job<'t> {
    /// The `INSERT`: its query, and the sink.
    fn insert(&mut self, plan: &LogicalPlan) -> Result<(), SqlError> {
        let LogicalPlan::Dml(dml) = plan else {
            return Err(SqlError::plain("expected INSERT INTO … SELECT"));
        };
        if !matches!(dml.op, WriteOp::Insert(_)) {
            return Err(SqlError::plain(format!("{} is not supported: a job INSERTs into its sink", dml.op)));
        }
        let sink_name = dml.table_name.table().to_string();
        let sink = self
            .tables
            .get(&sink_name)
            .ok_or_else(|| SqlError::plain(format!("INSERT INTO {sink_name}: no such table")))?;
        let Some((kind, config)) = sink.connector.sink() else {
            return Err(SqlError::plain(format!(
                "INSERT INTO {sink_name}: its connector reads; it cannot be written to"
            )));
        };
        for f in sink.schema.fields() {
            if column_type(f.data_type()).is_none() {
                return Err(SqlError::plain(format!(
                    "table {sink_name}: column {} is {}, a type Weir's sinks cannot write yet",
                    f.name(),
                    f.data_type()
                )));
            }
        }
        self.sink = sink_name.clone();
        let c = self.collapse(&dml.input)?;
        // A Parquet file holds rows, not changes: an updating result would lose its retractions there.
        if c.input.updating() && config.get("format").and_then(|f| f.as_str()) == Some("parquet") {
            return Err(SqlError::plain(format!(
                "INSERT INTO {sink_name}: the result updates (a GROUP BY without a window), and format 'parquet' \
                 cannot hold its changes yet: write text, csv or json, whose lines carry +I, -U, +U and -D"
            )));
        }
        let names: Vec<String> = dml.input.schema().fields().iter().map(|f| f.name().clone()).collect();
        let input = self.project(&format!("{sink_name}.select"), c, &names, None)?;
        self.ops.push(operator(&format!("{sink_name}.sink"), kind, Some(&input), config));
        Ok(())
    }

    /// Every column of a table, read from its source.
    fn scan(&self, table: &str, columns: impl Iterator<Item = String>) -> Result<Collapsed, SqlError> {
        let t = self.tables.get(table).ok_or_else(|| SqlError::plain(format!("no table {table}")))?;
        if t.connector.source(None).is_none() {
            return Err(SqlError::plain(format!("table {table} is a sink: it cannot be read")));
        }
        let exprs = columns.map(plain_column).collect();
        Ok(Collapsed { input: Input::Table(table.to_string()), window: None, predicate: Vec::new(), exprs })
    }

    /// Projections, filters and aliases down to a table read or a window aggregate, as conditions and
    /// expressions over its columns.
    fn collapse(&mut self, plan: &LogicalPlan) -> Result<Collapsed, SqlError> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                let table = scan.table_name.table().to_string();
                if let Some(w) = self.windows.get(&table) {
                    let mut c = self.windowed(w)?;
                    // A filter pushed into the scan may read columns it does not project: over all of them.
                    let all = DFSchema::try_from_qualified_schema(scan.table_name.clone(), &scan.source.schema())
                        .map_err(df)?;
                    for f in &scan.filters {
                        let e = substitute(f.clone().unalias_nested().data, &all, &c.exprs)?;
                        c.predicate.push(e);
                    }
                    if let Some(p) = &scan.projection {
                        c.exprs = p.iter().map(|&i| c.exprs[i].clone()).collect();
                    }
                    return Ok(c);
                }
                let columns = scan.projected_schema.fields().iter().map(|f| f.name().clone());
                let mut c = self.scan(&table, columns)?;
                c.predicate = scan.filters.iter().map(|f| f.clone().unalias_nested().data).map(unqualified).collect();
                Ok(c)
            }
            LogicalPlan::SubqueryAlias(a) => self.collapse(&a.input),
            LogicalPlan::Projection(p) => {
                let mut c = self.collapse(&p.input)?;
                let inner = std::mem::take(&mut c.exprs);
                c.exprs = p
                    .expr
                    .iter()
                    .map(|e| substitute(e.clone().unalias_nested().data, p.input.schema(), &inner))
                    .collect::<Result<_, _>>()?;
                Ok(c)
            }
            LogicalPlan::Filter(f) => {
                if let Some(top) = self.top_n(f)? {
                    return Ok(top);
                }
                let mut c = self.collapse(&f.input)?;
                for part in split_conjunction(&f.predicate) {
                    let e = substitute(part.clone().unalias_nested().data, f.input.schema(), &c.exprs)?;
                    c.predicate.push(e);
                }
                Ok(c)
            }
            LogicalPlan::Aggregate(a) => {
                let mut c = self.collapse(&a.input)?;
                match self.windowing(a, &mut c)? {
                    Some(windowing) => self.window_aggregate(a, c, windowing),
                    None => self.group_aggregate(a, c),
                }
            }
            LogicalPlan::Join(j) => self.join(j),
            LogicalPlan::Window(w) => self.over(w),
            other => {
                let what = feature(other);
                let verb = if what.ends_with('s') { "are" } else { "is" };
                Err(SqlError::plain(format!("{what} {verb} not supported yet")))
            }
        }
    }

    /// A window function's rows: its table's (or view's) columns, then the window columns.
    fn windowed(&mut self, w: &WindowTable) -> Result<Collapsed, SqlError> {
        let f = w.call.function.name();
        let mut c = match self.views.get(&w.call.table) {
            Some(view) => self.collapse(view)?,
            None => self.scan(&w.call.table, w.columns.iter().cloned())?,
        };
        if c.window.is_some() || !matches!(c.input, Input::Table(_)) {
            return Err(SqlError::plain(format!(
                "{f}(TABLE {} …): a window over windowed or aggregated rows is not supported yet",
                w.call.table
            )));
        }
        let column = |name: &str| {
            let i = w.columns.iter().position(|n| n == name);
            i.map(|i| c.exprs[i].clone()).ok_or_else(|| SqlError::plain(format!("{f}: no column {name}")))
        };
        let time = column(&w.call.time_column)?;
        let partition = w.call.partition_by.iter().map(|p| column(p)).collect::<Result<_, _>>()?;
        c.window = Some(WindowRead { name: w.call.name.clone(), time, partition });
        c.exprs.extend(WINDOW_COLUMNS.map(window_column));
        Ok(c)
    }

    /// A stateful step: a `project` of `c` (its columns named `names`) keyed by `keys`, uid `<sink>.<role>-input`,
    /// and an operator of `kind` over it, uid `<sink>.<role>`; the latter's uid (an existing one's where the same
    /// operator is there already).
    fn keyed_step(
        &mut self,
        role: &str,
        c: Collapsed,
        names: &[String],
        keys: Vec<Expr>,
        kind: &str,
        config: BTreeMap<String, ConfigValue>,
    ) -> Result<String, SqlError> {
        let input_uid = self.fresh_uid(format!("{}.{role}-input", self.sink));
        let input = self.project(&input_uid, c, names, Some(keys))?;
        let uid = self.fresh_uid(format!("{}.{role}", self.sink));
        Ok(self.add(operator(&uid, kind, Some(&input), config)))
    }

    /// Adds `op` to the job, unless an operator that reads the same input with the same config is there already
    /// (a query reading one aggregate twice, as q5 does): its uid, the one whose output is the same.
    fn add(&mut self, op: OperatorFile) -> String {
        let same = |o: &&OperatorFile| OperatorFile { uid: op.uid.clone(), ..(*o).clone() } == op;
        if let Some(existing) = self.ops.iter().find(same) {
            return existing.uid.clone();
        }
        let uid = op.uid.clone();
        self.ops.push(op);
        uid
    }

    /// A uid of the job not taken yet: `base`, else `base-2`, `base-3`, ….
    fn fresh_uid(&self, base: String) -> String {
        let taken = |u: &str| self.ops.iter().any(|o| o.uid == u);
        if !taken(&base) {
            return base;
        }
        (2..).map(|n| format!("{base}-{n}")).find(|u| !taken(u)).unwrap_or(base)
    }

    /// The source reading `table` (one per table, however often the query reads it).
    fn source(&mut self, table: &str) -> Result<String, SqlError> {
        if let Some(uid) = self.sources.get(table) {
            return Ok(uid.clone());
        }
        let t = &self.tables[table];
        let Some((kind, config)) = t.connector.source(self.parallelism) else {
            return Err(SqlError::plain(format!("table {table} cannot be read")));
        };
        let mut op = operator(table, kind, None, config);
        if let Some(ms) = t.watermark_ms {
            op.watermarks = Some(WatermarksFile { max_out_of_orderness_ms: Some(ms), ..WatermarksFile::default() });
        }
        self.ops.push(op);
        self.sources.insert(table.to_string(), table.to_string());
        Ok(table.to_string())
    }

    /// A `project` over `c`'s input: its conditions and expressions (onto a source kind's columns where it reads
    /// a table), and, with `key`, what its output is keyed by (no expressions: one key for every row).
    fn project(
        &mut self,
        uid: &str,
        c: Collapsed,
        names: &[String],
        key: Option<Vec<Expr>>,
    ) -> Result<String, SqlError> {
        if let Some(read) = &c.window {
            let f = self.windows[&read.name].call.function.name();
            return Err(SqlError::plain(format!(
                "{f}: reading a window function's rows other than by GROUP BY window_start, window_end is not \
                 supported yet"
            )));
        }
        if c.exprs.iter().chain(&c.predicate).any(rank::reads_rank) {
            return Err(SqlError::plain(
                "reading the rank of a Top-N that keeps more than one row per partition is not supported yet: \
                 leave it out of the SELECT (Flink's advice too: its Top-N without the rank emits less)",
            ));
        }
        let (input, table, schema) = match &c.input {
            Input::Table(table) => {
                let t = &self.tables[table];
                (self.source(table)?, Some(t), source_schema(t)?)
            }
            Input::Operator { uid, schema, .. } => (uid.clone(), None, schema.clone()),
        };
        let onto = |e: Expr| match table {
            Some(t) => onto_source(e, t),
            None => Ok(e),
        };
        let mut predicate = Vec::new();
        for e in c.predicate {
            predicate.push(simplified(onto(e)?, &schema, &[])?);
        }
        let guarantees = guarantees(&predicate);
        let mut config = BTreeMap::new();
        if let Some(p) = conjunction(predicate) {
            let text = sql_text(&p)?;
            // What the task managers will parse, checked here against the same bounds.
            crate::expr::parse_expr(&text).map_err(|e| SqlError::plain(format!("the WHERE condition: {e}")))?;
            config.insert("where".to_string(), ConfigValue::from(text));
        }
        let mut select = Vec::new();
        for (e, name) in c.exprs.into_iter().zip(names) {
            let text = sql_text(&simplified(onto(e)?, &schema, &guarantees)?)?;
            crate::expr::parse_expr(&text).map_err(|e| SqlError::plain(format!("column {name}: {e}")))?;
            select.push(format!("{text} AS {}", quoted(name)));
        }
        config.insert("select".to_string(), ConfigValue::from(select.join(", ")));
        if let Some(key) = key {
            let mut texts = Vec::new();
            for e in key {
                let text = sql_text(&simplified(onto(e)?, &schema, &guarantees)?)?;
                crate::expr::parse_expr(&text).map_err(|e| SqlError::plain(format!("the GROUP BY column: {e}")))?;
                texts.push(text);
            }
            let text = if texts.is_empty() { "0".to_string() } else { texts.join(", ") };
            config.insert("key".to_string(), ConfigValue::from(text));
        }
        Ok(self.add(operator(uid, "project", Some(&input), config)))
    }
}

/// What the conditions `predicate` (over a table's declared columns) guarantee of the rows read, onto the table's
/// source columns: how a column read under a filter is compared with the source's event time.
fn source_guarantees(
    predicate: &[Expr],
    t: &Table,
    schema: &Arc<DFSchema>,
) -> Result<Vec<(Expr, NullableInterval)>, SqlError> {
    let mut simple = Vec::new();
    for p in predicate {
        simple.push(simplified(onto_source(p.clone(), t)?, schema, &[])?);
    }
    Ok(guarantees(&simple))
}

/// `e` simplified over `schema`, under what `guarantees` say of the rows.
fn simplified(e: Expr, schema: &Arc<DFSchema>, guarantees: &[(Expr, NullableInterval)]) -> Result<Expr, SqlError> {
    let context = SimplifyContext::builder()
        .with_schema(schema.clone())
        .with_config_options(Arc::new(Functions::shared().options().clone()))
        .build();
    let e = ExprSimplifier::new(context).with_guarantees(guarantees.to_vec()).simplify(e).map_err(df)?;
    Ok(case_of_constant(e))
}

/// A name as SQL, backticked.
fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// An expression as SQL text the task managers parse again.
fn sql_text(e: &Expr) -> Result<String, SqlError> {
    datafusion_sql::unparser::Unparser::new(&Reparsed).expr_to_sql(e).map(|a| a.to_string()).map_err(df)
}

/// DataFusion's default SQL dialect, but that a cast to a timestamp says its precision: a bare `TIMESTAMP` reads
/// back as nanoseconds, where Weir's timestamps are milliseconds.
struct Reparsed;

impl datafusion_sql::unparser::dialect::Dialect for Reparsed {
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        datafusion_sql::unparser::dialect::DefaultDialect {}.identifier_quote_style(identifier)
    }

    fn timestamp_cast_dtype(&self, unit: &TimeUnit, tz: &Option<Arc<str>>) -> sqlparser::ast::DataType {
        let digits = match unit {
            TimeUnit::Second => 0,
            TimeUnit::Millisecond => 3,
            TimeUnit::Microsecond => 6,
            TimeUnit::Nanosecond => 9,
        };
        let zone = match tz {
            Some(_) => sqlparser::ast::TimezoneInfo::WithTimeZone,
            None => sqlparser::ast::TimezoneInfo::None,
        };
        sqlparser::ast::DataType::Timestamp(Some(digits), zone)
    }
}

/// A column of an operator's rows by its plain name.
fn plain_column(name: impl Into<String>) -> Expr {
    Expr::Column(datafusion_common::Column::new_unqualified(name))
}

/// Column `name` of an operator's output, of type `has`, as the plan types it (`wants`): cast where they differ.
fn as_planned(name: impl Into<String>, has: &DataType, wants: &DataType) -> Expr {
    let e = plain_column(name);
    if has == wants {
        e
    } else {
        datafusion_expr::cast(e, wants.clone())
    }
}

/// An aggregate's grouping expressions over the rows `c` collapses to.
fn grouping(agg: &datafusion_expr::Aggregate, c: &Collapsed) -> Result<Vec<Expr>, SqlError> {
    agg.group_expr
        .iter()
        .map(|g| {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(SqlError::plain("GROUPING SETS, CUBE and ROLLUP are not supported yet"));
            }
            substitute(g.clone().unalias_nested().data, agg.input.schema(), &c.exprs)
        })
        .collect()
}

/// Drops table qualifiers: the operators' rows have plain column names.
fn unqualified(e: Expr) -> Expr {
    e.transform_up(|x| match x {
        Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(plain_column(c.name))),
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
    .unwrap_or_else(|e| unreachable!("the rewrite cannot fail: {e}"))
}

/// `e` (over rows of `schema`) with each column replaced by the expression `inner` gives it.
fn substitute(e: Expr, schema: &DFSchema, inner: &[Expr]) -> Result<Expr, SqlError> {
    e.transform_up(|x| match x {
        Expr::Column(c) => {
            let i = schema.index_of_column(&c)?;
            Ok(Transformed::yes(inner[i].clone()))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
    .map_err(df)
}

/// `e`, over the table's declared columns, onto the source kind's columns: computed columns by their
/// expressions, a `ROW`'s fields by the kind's columns.
fn onto_source(e: Expr, t: &Table) -> Result<Expr, SqlError> {
    // Computed columns first (their expressions read the declared columns).
    let e = e
        .transform_up(|x| match x {
            Expr::Column(c) if t.computed.contains_key(&c.name) => {
                Ok(Transformed::yes(unqualified(t.computed[&c.name].clone())))
            }
            other => Ok(Transformed::no(other)),
        })
        .map_err(df)?
        .data;
    let mut refused: Option<SqlError> = None;
    let mapped = e
        .transform_down(|x| {
            if let Expr::ScalarFunction(f) = &x {
                if f.func.name() == "get_field" {
                    if let [Expr::Column(c), Expr::Literal(ScalarValue::Utf8(Some(field)), _)] = f.args.as_slice() {
                        return match t.connector.map_field(&c.name, field) {
                            Some(m) => Ok(Transformed::new(
                                mapped(m),
                                true,
                                datafusion_common::tree_node::TreeNodeRecursion::Jump,
                            )),
                            None => {
                                refused = Some(SqlError::plain(format!("{}.{field} cannot be read", c.name)));
                                Ok(Transformed::no(x))
                            }
                        };
                    }
                }
            }
            if let Expr::Column(c) = &x {
                return match t.connector.map_column(&c.name) {
                    Some(m) => Ok(Transformed::yes(mapped(m))),
                    None => {
                        refused = Some(SqlError::plain(format!(
                            "column {} is read whole: read its fields ({}.field) instead",
                            c.name, c.name
                        )));
                        Ok(Transformed::no(x))
                    }
                };
            }
            Ok(Transformed::no(x))
        })
        .map_err(df)?
        .data;
    match refused {
        Some(e) => Err(e),
        None => Ok(mapped),
    }
}

fn mapped(m: Mapped) -> Expr {
    match m {
        Mapped::Column(c) => plain_column(c),
        Mapped::TimeOf(event_type) => when(col("event_type").eq(lit(event_type)), col("date_time"))
            .end()
            .unwrap_or_else(|e| unreachable!("a CASE with a WHEN: {e}")),
    }
}

/// `CASE c WHEN v1 THEN … END` with `c` and every `v` constant (what a guarantee leaves of the computed event time
/// of Nexmark's table) is the branch `c` selects: DataFusion's simplifier leaves it whole.
fn case_of_constant(e: Expr) -> Expr {
    e.transform_up(|x| {
        if let Expr::Case(case) = &x {
            if let Some(Expr::Literal(base, _)) = case.expr.as_deref() {
                let whens: Option<Vec<&ScalarValue>> = case
                    .when_then_expr
                    .iter()
                    .map(|(w, _)| if let Expr::Literal(v, _) = w.as_ref() { Some(v) } else { None })
                    .collect();
                if let (Some(whens), false) = (whens, base.is_null()) {
                    let t = base.data_type();
                    let whens: Option<Vec<ScalarValue>> = whens.iter().map(|w| w.cast_to(&t).ok()).collect();
                    if let Some(whens) = whens {
                        let chosen = whens.iter().position(|w| w == base);
                        let branch = match chosen {
                            Some(i) => Some(case.when_then_expr[i].1.as_ref().clone()),
                            None => case.else_expr.as_deref().cloned(),
                        };
                        if let Some(b) = branch {
                            return Ok(Transformed::yes(b));
                        }
                    }
                }
            }
        }
        Ok(Transformed::no(x))
    })
    .map(|t| t.data)
    .unwrap_or_else(|e| unreachable!("the rewrite cannot fail: {e}"))
}

/// What a condition's conjuncts `column = constant` guarantee of the rows it keeps.
fn guarantees(predicate: &[Expr]) -> Vec<(Expr, NullableInterval)> {
    let mut out = Vec::new();
    for p in predicate {
        for part in split_conjunction(p) {
            if let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = part {
                match (left.as_ref(), right.as_ref()) {
                    (Expr::Column(_), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(_)) if !v.is_null() => {
                        let c = if matches!(left.as_ref(), Expr::Column(_)) { left } else { right };
                        out.push((c.as_ref().clone(), NullableInterval::from(v.clone())));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

/// The source kind's columns a table reads, with their types (what its mapped expressions are typed over).
fn source_schema(t: &Table) -> Result<Arc<DFSchema>, SqlError> {
    let mut fields: Vec<Field> = Vec::new();
    let mut add = |name: &str, dt: DataType| {
        if !fields.iter().any(|f| f.name() == name) {
            fields.push(Field::new(name, dt, true));
        }
    };
    if matches!(t.connector, Connector::Nexmark { .. }) {
        add("date_time", DataType::Timestamp(TimeUnit::Millisecond, None));
    }
    for f in t.schema.fields() {
        if t.computed.contains_key(f.name()) {
            continue;
        }
        if let DataType::Struct(inner) = f.data_type() {
            for g in inner {
                if let Some(Mapped::Column(c)) = t.connector.map_field(f.name(), g.name()) {
                    add(&c, g.data_type().clone());
                }
            }
        } else if let Some(Mapped::Column(c)) = t.connector.map_column(f.name()) {
            add(&c, f.data_type().clone());
        }
    }
    DFSchema::try_from(Schema::new(fields)).map(Arc::new).map_err(df)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cast_to_a_timestamp_reads_back_with_its_precision() {
        let schema = Schema::new(vec![Field::new("n", DataType::Int64, true)]);
        for unit in [TimeUnit::Second, TimeUnit::Millisecond, TimeUnit::Microsecond, TimeUnit::Nanosecond] {
            let t = DataType::Timestamp(unit, None);
            let text = sql_text(&datafusion_expr::cast(col("n"), t.clone())).unwrap();
            let parsed = crate::expr::parse_expr(&text).unwrap();
            let compiled = crate::expr::compile::compile(&parsed, &schema).unwrap();
            assert_eq!(compiled.data_type(), &t, "{text}");
        }
    }
}
