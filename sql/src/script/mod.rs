//! Flink SQL scripts planned into Weir jobs (DESIGN §11): `SET`, `CREATE TABLE … WITH (…)` with computed
//! columns and a watermark, `CREATE VIEW`, and one `INSERT INTO … SELECT`.
//!
//! - [`statements`]: the script's text to statements, Flink's DDL taken apart, every error with its line and
//!   column.
//! - [`settings`]: `SET 'key' = 'value'` with Flink's keys.
//! - [`connectors`]: a table's `WITH` options to the Weir kind it reads or writes, and the columns a source's
//!   SQL shape maps onto.
//! - [`plan`]: DataFusion's logical plan of the `INSERT` to Weir operators.
//! - [`error`]: [`SqlError`], what is wrong and where, below the rest.

pub mod connectors;
pub mod error;
pub mod plan;
pub mod settings;
pub mod statements;

pub use error::SqlError;
pub use plan::{PlanOptions, Planned};

/// Plans a script into a job. Planning recurses over the script's expressions and plans, so it runs on a thread
/// of its own with a stack many times what the bounds on a script's nesting need.
pub fn plan_script(text: &str, options: &PlanOptions) -> Result<Planned, SqlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text).to_string();
    let options = options.clone();
    std::thread::Builder::new()
        .name("weir-sql-plan".into())
        .stack_size(64 << 20)
        .spawn(move || plan::plan(statements::statements(&text)?, &options))
        .map_err(|e| SqlError::plain(format!("cannot start the planner: {e}")))?
        .join()
        .unwrap_or_else(|_| {
            Err(SqlError::plain("the planner failed on this script (a fault in Weir: please report it)"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bench/nexmark/sql`'s source, views and query `q`, sinking into a blackhole.
    fn nexmark(q: &str) -> String {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/nexmark/sql");
        let read =
            |p: std::path::PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let text = [
            read(dir.join("source.sql")),
            read(dir.join("views.sql")),
            read(dir.join("queries").join(format!("{q}.sql"))),
        ]
        .join("\n");
        text.replace("${EVENTS}", "1000")
            .replace("${TPS}", "100")
            .replace("${BLOCK}", "0")
            .replace("${SINK}", "'connector' = 'blackhole'")
    }

    fn planned(q: &str) -> Planned {
        let options = PlanOptions { name: q.into(), parallelism: Some(2) };
        plan_script(&nexmark(q), &options).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn config(p: &Planned, uid: &str, key: &str) -> String {
        let op = p.spec.operators.iter().find(|o| o.uid == uid).unwrap_or_else(|| panic!("no {uid}: {:?}", p.spec));
        op.config.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string()
    }

    #[test]
    fn nexmark_q0_to_q2_plan_into_a_source_a_projection_and_a_sink() {
        let q0 = planned("q0");
        let kinds: Vec<(&str, &str)> = q0.spec.operators.iter().map(|o| (o.uid.as_str(), o.kind.as_str())).collect();
        assert_eq!(kinds, [("datagen", "nexmark"), ("nexmark_q0.select", "project"), ("nexmark_q0.sink", "blackhole")]);
        let source = &q0.spec.operators[0];
        assert_eq!(source.watermarks.as_ref().and_then(|w| w.max_out_of_orderness_ms), Some(3999));
        assert_eq!(source.config.get("splits").and_then(|v| v.as_u64()), Some(2));
        assert_eq!(config(&q0, "nexmark_q0.select", "where"), "(event_type = 2)");
        let select = config(&q0, "nexmark_q0.select", "select");
        assert!(select.starts_with("bid_auction AS `auction`, bid_bidder AS `bidder`"), "{select}");
        // The event's time, once the filter guarantees the event is a bid.
        assert!(select.contains("date_time AS `dateTime`"), "{select}");
        let q1 = planned("q1");
        let select = config(&q1, "nexmark_q1.select", "select");
        assert!(select.contains("0.908 * CAST(bid_price AS DECIMAL(20,0))"), "{select}");
        assert!(select.contains("AS DECIMAL(23,3)) AS `price`"), "{select}");
        let q2 = planned("q2");
        let where_ = config(&q2, "nexmark_q2.select", "where");
        assert!(where_.contains("event_type = 2") && where_.contains("bid_auction % 123"), "{where_}");
        // What the task managers compile: every text parses again.
        for p in [&q0, &q1, &q2] {
            let op = &p.spec.operators[1];
            crate::expr::parse_select(&config(p, &op.uid, "select")).unwrap();
            crate::expr::parse_expr(&config(p, &op.uid, "where")).unwrap();
        }
    }
}
