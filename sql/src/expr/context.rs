//! What an expression may call, and how SQL text is read: DataFusion's scalar, aggregate and window functions,
//! Weir's own ([`super::udf`]), DataFusion's expression planners (field access `person.id`, `EXTRACT`, …), and
//! the planner's options, set to Flink's conventions: names are kept as written (Flink does not fold them to
//! lower case), `0.908` is a `DECIMAL(3, 3)` (not a double), strings are `Utf8`.

use arrow_schema::DataType;
use datafusion_common::config::ConfigOptions;
use datafusion_common::{plan_err, Result, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, TableSource, WindowUDF};
use datafusion_sql::planner::ParserOptions;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The functions SQL may call, by lower-case name (and alias), and the planner's options.
pub struct Functions {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    windows: HashMap<String, Arc<WindowUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

impl Functions {
    /// The one registry of the process (built on first use).
    pub fn shared() -> &'static Functions {
        static SHARED: OnceLock<Functions> = OnceLock::new();
        SHARED.get_or_init(Functions::new)
    }

    fn new() -> Functions {
        let mut scalars = HashMap::new();
        let mut own: Vec<Arc<ScalarUDF>> = datafusion_functions::all_default_functions();
        own.extend(datafusion_functions_nested::all_default_nested_functions());
        for reads in [super::udf::KeyAs::Int, super::udf::KeyAs::String] {
            own.push(Arc::new(ScalarUDF::new_from_impl(super::udf::KeyColumn::new(reads))));
        }
        for f in own {
            for alias in f.aliases() {
                scalars.insert(alias.to_lowercase(), f.clone());
            }
            scalars.insert(f.name().to_lowercase(), f);
        }
        let mut aggregates = HashMap::new();
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            for alias in f.aliases() {
                aggregates.insert(alias.to_lowercase(), f.clone());
            }
            aggregates.insert(f.name().to_lowercase(), f);
        }
        let mut windows = HashMap::new();
        for f in datafusion_functions_window::all_default_window_functions() {
            for alias in f.aliases() {
                windows.insert(alias.to_lowercase(), f.clone());
            }
            windows.insert(f.name().to_lowercase(), f);
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions_nested::planner::NestedFunctionPlanner),
            Arc::new(datafusion_functions_nested::planner::FieldAccessPlanner),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
            Arc::new(datafusion_functions_window::planner::WindowFunctionPlanner),
        ];
        let mut options = ConfigOptions::default();
        options.sql_parser.parse_float_as_decimal = true;
        options.sql_parser.enable_ident_normalization = false;
        options.sql_parser.map_string_types_to_utf8view = false;
        options.execution.time_zone = Some("+00:00".into());
        Functions { scalars, aggregates, windows, planners, options }
    }

    /// The SQL planner's options (from [`Functions::options`]).
    pub fn parser_options(&self) -> ParserOptions {
        let o = &self.options.sql_parser;
        ParserOptions {
            parse_float_as_decimal: o.parse_float_as_decimal,
            enable_ident_normalization: o.enable_ident_normalization,
            map_string_types_to_utf8view: o.map_string_types_to_utf8view,
            ..ParserOptions::default()
        }
    }

    /// The scalar function called `name` (lower case).
    pub fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalars.get(name).cloned()
    }

    /// The options planning and evaluation run with.
    pub fn options(&self) -> &ConfigOptions {
        &self.options
    }
}

/// What DataFusion's SQL planner asks while it plans: the functions, and the tables a query may read.
pub struct Catalog<'a> {
    functions: &'a Functions,
    tables: HashMap<String, Arc<dyn TableSource>>,
}

impl<'a> Catalog<'a> {
    /// A catalog of no tables (for expressions over one row).
    pub fn functions_only(functions: &'a Functions) -> Self {
        Catalog { functions, tables: HashMap::new() }
    }

    /// Adds a table a query may read.
    pub fn add_table(&mut self, name: &str, source: Arc<dyn TableSource>) {
        self.tables.insert(name.to_string(), source);
    }
}

impl ContextProvider for Catalog<'_> {
    fn get_table_source(&self, name: TableReference) -> Result<Arc<dyn TableSource>> {
        match self.tables.get(name.table()) {
            Some(t) if name.schema().is_none() => Ok(t.clone()),
            _ => plan_err!("no table named {name}"),
        }
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.functions.planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.functions.scalars.get(&name.to_lowercase()).cloned()
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.functions.aggregates.get(&name.to_lowercase()).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.functions.windows.get(&name.to_lowercase()).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.functions.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.functions.scalars.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.functions.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.functions.windows.keys().cloned().collect()
    }
}
