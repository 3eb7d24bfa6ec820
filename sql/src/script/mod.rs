//! Flink SQL scripts planned into Weir jobs (DESIGN §11): `SET`, `CREATE TABLE … WITH (…)` with computed
//! columns and a watermark, `CREATE VIEW`, and one `INSERT INTO … SELECT`.
//!
//! - [`statements`]: the script's text to statements, Flink's DDL taken apart, every error with its line and
//!   column.
//! - [`settings`]: `SET 'key' = 'value'` with Flink's keys.
//! - [`connectors`]: a table's `WITH` options to the Weir kind it reads or writes, and the columns a source's
//!   SQL shape maps onto.
//! - [`windows`]: window functions (`TUMBLE`, `HOP`, `SESSION`) resolved, and the `window-aggregate` a
//!   `GROUP BY window_start, window_end` over one becomes.
//! - [`plan`]: DataFusion's logical plan of the `INSERT` to Weir operators.
//! - [`error`]: [`SqlError`], what is wrong and where, below the rest.

pub mod connectors;
pub mod error;
pub mod plan;
pub mod settings;
pub mod statements;
pub mod windows;

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

    /// Each operator's uid and kind, in order.
    fn uids_and_kinds(p: &Planned) -> Vec<(&str, &str)> {
        p.spec.operators.iter().map(|o| (o.uid.as_str(), o.kind.as_str())).collect()
    }

    fn config(p: &Planned, uid: &str, key: &str) -> String {
        let op = p.spec.operators.iter().find(|o| o.uid == uid).unwrap_or_else(|| panic!("no {uid}: {:?}", p.spec));
        op.config.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string()
    }

    #[test]
    fn nexmark_q0_to_q2_plan_into_a_source_a_projection_and_a_sink() {
        let q0 = planned("q0");
        let kinds = uids_and_kinds(&q0);
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

    #[test]
    fn nexmark_q11_plans_into_a_session_window_aggregate_keyed_by_bidder() {
        let q = planned("q11");
        let kinds = uids_and_kinds(&q);
        assert_eq!(
            kinds,
            [
                ("datagen", "nexmark"),
                ("nexmark_q11.window-input", "project"),
                ("nexmark_q11.window", "window-aggregate"),
                ("nexmark_q11.select", "project"),
                ("nexmark_q11.sink", "blackhole")
            ]
        );
        assert_eq!(config(&q, "nexmark_q11.window-input", "key"), "bid_bidder");
        assert_eq!(config(&q, "nexmark_q11.window-input", "where"), "(event_type = 2)");
        let window = &q.spec.operators[2].config;
        assert_eq!(window["window"]["session_gap_ms"].as_i64(), Some(10_000), "{window:?}");
        assert_eq!(window["aggregate"].as_str(), Some("count"));
        let select = config(&q, "nexmark_q11.select", "select");
        assert_eq!(select, "key_int(\"key\") AS `bidder`, \"value\" AS `bid_count`, window_start AS `starttime`, window_end AS `endtime`");
        crate::expr::parse_select(&select).unwrap();
    }

    /// `bench/nexmark/sql`'s source and views, then `query` into a sink of `columns`.
    fn over_nexmark(columns: &str, query: &str) -> Result<Planned, SqlError> {
        let text = format!(
            "{}\nCREATE TABLE s ({columns}) WITH ('connector' = 'blackhole');\nINSERT INTO s {query}",
            nexmark("q0").split("CREATE TABLE nexmark_q0").next().unwrap_or_default()
        );
        plan_script(&text, &PlanOptions { name: "w".into(), parallelism: Some(2) })
    }

    #[test]
    fn tumble_and_hop_plan_their_windows_aggregate_and_key() {
        let hop = over_nexmark(
            "m BIGINT, ws TIMESTAMP(3), wt TIMESTAMP(3)",
            "SELECT MAX(price), window_start, window_time FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), \
             INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end, window_time",
        )
        .unwrap();
        assert_eq!(config(&hop, "s.window-input", "key"), "0", "one key: no column is grouped by");
        assert_eq!(config(&hop, "s.window-input", "select"), "bid_price AS `value`");
        let w = &hop.spec.operators[2].config;
        assert_eq!((w["window"]["sliding_ms"].as_i64(), w["window"]["slide_ms"].as_i64()), (Some(10_000), Some(2_000)));
        assert_eq!(w["aggregate"].as_str(), Some("max"));
        let select = config(&hop, "s.select", "select");
        assert!(select.starts_with("\"value\" AS `m`, window_start AS `ws`, (window_end - "), "{select}");
        let tumble = over_nexmark(
            "channel VARCHAR, n BIGINT",
            "SELECT channel, COUNT(url) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND, \
             INTERVAL '1' SECOND)) GROUP BY channel, window_start, window_end",
        )
        .unwrap();
        assert_eq!(config(&tumble, "s.window-input", "key"), "bid_channel");
        let where_ = config(&tumble, "s.window-input", "where");
        assert!(where_.contains("bid_url IS NOT NULL"), "COUNT(url) counts the rows with a url: {where_}");
        let w = &tumble.spec.operators[2].config;
        assert_eq!((w["window"]["tumbling_ms"].as_i64(), w["offset_ms"].as_i64()), (Some(10_000), Some(1_000)));
        assert!(config(&tumble, "s.select", "select").starts_with("key_string(\"key\") AS `channel`"));
        // q8's side of persons: two grouping columns, read back from their parts of the key.
        let persons = over_nexmark(
            "id BIGINT, name VARCHAR, stime TIMESTAMP(3)",
            "SELECT id, name, window_start FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' \
             SECOND)) GROUP BY id, name, window_start, window_end",
        )
        .unwrap();
        assert_eq!(config(&persons, "s.window-input", "key"), "person_id, person_name");
        assert_eq!(config(&persons, "s.window-input", "where"), "(event_type = 0)");
        let select = config(&persons, "s.select", "select");
        assert!(
            select.starts_with("key_int(\"key\", 'i,s', 1) AS `id`, key_string(\"key\", 'i,s', 2) AS `name`"),
            "{select}"
        );
        crate::expr::parse_select(&select).unwrap();
    }

    /// A condition on a column the query reads only there: DataFusion pushes it into the window function's scan,
    /// which does not project that column.
    #[test]
    fn a_window_aggregate_filters_on_columns_it_does_not_select() {
        let p = over_nexmark(
            "a BIGINT, n BIGINT",
            "SELECT auction, COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND)) \
             WHERE price > 10 GROUP BY auction, window_start, window_end",
        )
        .unwrap();
        let condition = config(&p, "s.window-input", "where");
        assert!(condition.contains("bid_price > 10"), "{condition}");
    }

    #[test]
    fn windows_weir_cannot_run_are_refused_by_name() {
        let hop = "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))";
        let cases = [
            (format!("SELECT COUNT(*) {hop} GROUP BY auction, window_start"), "groups by window_start and window_end"),
            (format!("SELECT COUNT(*) + SUM(price) {hop} GROUP BY window_start, window_end"), "more than one aggregate"),
            (format!("SELECT COUNT(DISTINCT auction) {hop} GROUP BY window_start, window_end"), "DISTINCT"),
            (format!("SELECT COUNT(*) {hop} GROUP BY price > 10, window_start, window_end"), "GROUP BY a Boolean column"),
            (format!("SELECT auction {hop}"), "other than by GROUP BY"),
            (format!("SELECT COUNT(*) {hop} WHERE window_start > TIMESTAMP '2020-01-01 00:00:00' GROUP BY window_start, window_end"), "before the GROUP BY"),
            ("SELECT COUNT(*) FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end".into(), "CUMULATE windows are not supported yet"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(price), INTERVAL '2' SECOND)) GROUP BY window_start, window_end".into(), "not a time attribute"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(nope), INTERVAL '2' SECOND)) GROUP BY window_start, window_end".into(), "bid has no column nope"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE nope, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND)) GROUP BY window_start, window_end".into(), "no table or view nope"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '0' SECOND)) GROUP BY window_start, window_end".into(), "longer than 0 ms"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), 10)) GROUP BY window_start, window_end".into(), "not an interval"),
            ("SELECT COUNT(*) FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND)) GROUP BY window_start, window_end".into(), "Weir reads HOP(TABLE t"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND)) GROUP BY window_start, window_end".into(), "Weir reads TUMBLE(TABLE t"),
            ("SELECT COUNT(*) FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND)) GROUP BY bidder, window_start, window_end".into(), "PARTITION BY the column"),
            ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND) GROUP BY window_start, window_end".into(), "never closed"),
        ];
        for (query, want) in cases {
            let e = over_nexmark("n BIGINT", &query).map(|p| format!("{:?}", p.spec)).unwrap_err().to_string();
            assert!(e.contains(want), "{query}: want {want:?}, got {e}");
        }
    }

    #[test]
    fn legacy_group_windows_plan_as_the_window_functions_they_are() {
        let columns = "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)";
        let tvf = over_nexmark(
            columns,
            "SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime FROM \
             TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND)) GROUP BY \
             bidder, window_start, window_end",
        )
        .unwrap();
        let legacy = over_nexmark(
            columns,
            "SELECT bidder, COUNT(*) AS bid_count, SESSION_START(`dateTime`, INTERVAL '10' SECOND) AS starttime, \
             SESSION_END(`dateTime`, INTERVAL '10' SECOND) AS endtime FROM bid GROUP BY bidder, \
             SESSION(`dateTime`, INTERVAL '10' SECOND)",
        )
        .unwrap();
        assert_eq!(legacy.spec, tvf.spec);
        let tumble = over_nexmark(
            "n BIGINT, e TIMESTAMP(3)",
            "SELECT COUNT(*), TUMBLE_ROWTIME(`dateTime`, INTERVAL '10' SECOND) FROM bid GROUP BY \
             TUMBLE(`dateTime`, INTERVAL '10' SECOND)",
        )
        .unwrap();
        assert_eq!(tumble.spec.operators[2].config["window"]["tumbling_ms"].as_i64(), Some(10_000));
        for (query, want) in [
            ("SELECT COUNT(*) FROM bid GROUP BY HOP(`dateTime`, INTERVAL '1' SECOND)", "HOP takes from 2 to 3"),
            ("SELECT COUNT(*) FROM bid GROUP BY TUMBLE(1, INTERVAL '1' SECOND)", "Weir reads GROUP BY TUMBLE"),
            (
                "SELECT TUMBLE_PROCTIME(`dateTime`, INTERVAL '1' SECOND) FROM bid GROUP BY TUMBLE(`dateTime`, INTERVAL '1' SECOND)",
                "TUMBLE_PROCTIME is not supported yet",
            ),
            (
                "SELECT COUNT(*) FROM bid GROUP BY TUMBLE(`dateTime`, INTERVAL '1' SECOND), SESSION(`dateTime`, INTERVAL '1' SECOND)",
                "more than one group window",
            ),
        ] {
            let e = over_nexmark("n BIGINT", query).map(|p| format!("{:?}", p.spec)).unwrap_err().to_string();
            assert!(e.contains(want), "{query}: want {want:?}, got {e}");
        }
    }

    #[test]
    fn nexmark_q3_plans_into_a_join_of_two_keyed_filtered_sides() {
        let q = planned("q3");
        let kinds = uids_and_kinds(&q);
        assert_eq!(
            kinds,
            [
                ("datagen", "nexmark"),
                ("nexmark_q3.join-left", "project"),
                ("nexmark_q3.join-right", "project"),
                ("nexmark_q3.join", "join"),
                ("nexmark_q3.select", "project"),
                ("nexmark_q3.sink", "blackhole")
            ]
        );
        let left_where = config(&q, "nexmark_q3.join-left", "where");
        assert!(left_where.contains("event_type = 1") && left_where.contains("auction_category = 10"), "{left_where}");
        assert_eq!(config(&q, "nexmark_q3.join-left", "key"), "auction_seller");
        assert_eq!(
            config(&q, "nexmark_q3.join-left", "select"),
            "auction_id AS `A.id`, auction_seller AS `A.seller`",
            "only what is read later: no description, no extra"
        );
        let right_where = config(&q, "nexmark_q3.join-right", "where");
        assert!(right_where.contains("event_type = 0") && right_where.contains("person_state = 'CA'"), "{right_where}");
        assert_eq!(config(&q, "nexmark_q3.join-right", "key"), "person_id");
        let join = &q.spec.operators[3];
        assert_eq!(
            join.inputs.as_deref(),
            Some(&["nexmark_q3.join-left".to_string(), "nexmark_q3.join-right".to_string()][..])
        );
        let select = config(&q, "nexmark_q3.select", "select");
        assert!(select.starts_with("\"P.name\" AS `name`"), "{select}");
        crate::expr::parse_select(&select).unwrap();
    }

    #[test]
    fn nexmark_q7_and_q8_join_windowed_aggregates() {
        // `B.dateTime BETWEEN W.wend - 10 s AND W.wend`, W's row time being wend − 1: W.t − B.t in −1 ..= 9999.
        let q7 = planned("q7");
        let join = q7.spec.operators.iter().find(|o| o.uid == "nexmark_q7.join").unwrap();
        assert_eq!(join.kind, "interval-join");
        assert_eq!((join.config["lower_ms"].as_i64(), join.config["upper_ms"].as_i64()), (Some(-1), Some(9_999)));
        assert!(!join.config.contains_key("where"), "the bounds are the whole condition: {:?}", join.config);
        assert_eq!(config(&q7, "nexmark_q7.join-left", "key"), "bid_price");
        assert_eq!(config(&q7, "nexmark_q7.join-right", "key"), "\"value\"");
        let q8 = planned("q8");
        assert_eq!(config(&q8, "nexmark_q8.join-left", "key"), "key_int(\"key\", 'i,s', 1), window_start, window_end");
        assert_eq!(config(&q8, "nexmark_q8.join-right", "key"), "key_int(\"key\"), window_start, window_end");
        let windows: Vec<&str> =
            q8.spec.operators.iter().filter(|o| o.kind == "window-aggregate").map(|o| o.uid.as_str()).collect();
        assert_eq!(windows, ["nexmark_q8.window", "nexmark_q8.window-2"]);
        // Joined on their windows' ends, both sides' rows are of the same time: an interval join of 0 ms, whose
        // rows leave its state once their window has passed.
        let join = q8.spec.operators.iter().find(|o| o.uid == "nexmark_q8.join").unwrap();
        assert_eq!(join.kind, "interval-join");
        assert_eq!((join.config["lower_ms"].as_i64(), join.config["upper_ms"].as_i64()), (Some(0), Some(0)));
    }

    #[test]
    fn nexmark_q5_ranks_one_hop_count_per_window() {
        let q5 = planned("q5");
        let kinds = uids_and_kinds(&q5);
        assert_eq!(
            kinds,
            [
                ("datagen", "nexmark"),
                ("nexmark_q5.window-input", "project"),
                ("nexmark_q5.window", "window-aggregate"),
                ("nexmark_q5.top-input", "project"),
                ("nexmark_q5.top", "window-top"),
                ("nexmark_q5.select", "project"),
                ("nexmark_q5.sink", "blackhole")
            ],
            "the per-auction HOP count is computed once, and its rows joined back to their window's maximum are its \
             rows of rank 1"
        );
        let op = |uid: &str| q5.spec.operators.iter().find(|o| o.uid == uid).unwrap();
        assert_eq!(op("nexmark_q5.window").config["window"]["sliding_ms"].as_i64(), Some(10_000));
        // Ranked per window: keyed by its start, in windows of 1 ms at the counts' time, window_end − 1.
        assert_eq!(config(&q5, "nexmark_q5.top-input", "key"), "window_start");
        assert_eq!(op("nexmark_q5.top").config["window"]["tumbling_ms"].as_i64(), Some(1));
        assert_eq!(config(&q5, "nexmark_q5.top", "by"), "t1");
        assert_eq!(config(&q5, "nexmark_q5.select", "select"), "t0 AS `auction`, t1 AS `num`");
    }

    #[test]
    fn a_join_with_a_windows_maximum_is_a_ranking_only_when_it_is_exactly_one() {
        let counts = "SELECT auction, COUNT(*) AS num, window_start, window_end \
                      FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
                      GROUP BY auction, window_start, window_end";
        let query = |filter: &str, cond: &str| {
            format!(
                "SELECT C.auction FROM ({counts}) AS C JOIN (SELECT MAX(num) AS maxn, window_start, window_end \
                 FROM ({counts}) {filter} GROUP BY window_start, window_end) AS M \
                 ON C.window_start = M.window_start AND C.window_end = M.window_end AND {cond}"
            )
        };
        let kinds = |q: String| {
            let p = over_nexmark("n BIGINT", &q).unwrap_or_else(|e| panic!("{q}: {e}"));
            p.spec.operators.iter().map(|o| o.kind.clone()).collect::<Vec<_>>()
        };
        for cond in ["C.num >= M.maxn", "M.maxn <= C.num", "C.num = M.maxn", "M.maxn = C.num"] {
            assert!(kinds(query("", cond)).contains(&"window-top".to_string()), "{cond}");
        }
        // Not the same rows on both sides, another comparison, or not the window's end: a join, as written.
        for (filter, cond) in [
            ("WHERE num > 3", "C.num >= M.maxn"),
            ("", "C.num > M.maxn"),
            ("", "C.num + 1 >= M.maxn"),
            ("", "C.auction >= M.maxn"),
        ] {
            let k = kinds(query(filter, cond));
            assert!(
                !k.contains(&"window-top".to_string()) && k.contains(&"interval-join".to_string()),
                "{filter} {cond}: {k:?}"
            );
        }
    }

    #[test]
    fn nexmark_q4_plans_two_updating_group_aggregates_over_a_regular_join() {
        let q4 = planned("q4");
        let kinds = uids_and_kinds(&q4);
        assert_eq!(
            kinds,
            [
                ("datagen", "nexmark"),
                ("nexmark_q4.join-left", "project"),
                ("nexmark_q4.join-right", "project"),
                ("nexmark_q4.join", "join"),
                ("nexmark_q4.group-input", "project"),
                ("nexmark_q4.group", "aggregate"),
                ("nexmark_q4.group-input-2", "project"),
                ("nexmark_q4.group-2", "aggregate"),
                ("nexmark_q4.select", "project"),
                ("nexmark_q4.sink", "blackhole")
            ]
        );
        assert_eq!(config(&q4, "nexmark_q4.group-input", "key"), "\"A.id\", \"A.category\"");
        assert_eq!(config(&q4, "nexmark_q4.group", "aggregates"), "MAX(a0) AS v0");
        assert_eq!(config(&q4, "nexmark_q4.group", "carry"), "g0, g1");
        assert_eq!(config(&q4, "nexmark_q4.group-input-2", "key"), "g1");
        assert_eq!(config(&q4, "nexmark_q4.group-2", "aggregates"), "AVG(a0) AS v0");
        // AVG of a BIGINT is a BIGINT (Flink's): the sink's column reads the aggregate's result as it is.
        let select = config(&q4, "nexmark_q4.select", "select");
        assert!(select.contains("v0"), "{select}");
    }

    #[test]
    fn over_aggregates_plan_into_a_project_keyed_by_the_partition_and_an_over() {
        let p = over_nexmark(
            "a BIGINT, p BIGINT, s BIGINT, n BIGINT",
            "SELECT auction, price, SUM(price) OVER w, COUNT(url) OVER w FROM bid \
             WINDOW w AS (PARTITION BY auction ORDER BY `dateTime` ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
        )
        .unwrap();
        let kinds: Vec<&str> = p.spec.operators.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["nexmark", "project", "over", "project", "blackhole"]);
        assert_eq!(config(&p, "s.over-input", "key"), "bid_auction");
        assert_eq!(
            config(&p, "s.over", "aggregates"),
            "SUM(a0) AS v0, SUM(a1) AS v1",
            "COUNT(url) sums 1 per non-null"
        );
        let over = p.spec.operators.iter().find(|o| o.uid == "s.over").unwrap();
        assert_eq!(over.config["rows_preceding"].as_u64(), Some(2));
        let unbounded = over_nexmark(
            "a BIGINT, m BIGINT",
            "SELECT auction, MAX(price) OVER (PARTITION BY auction ORDER BY `dateTime` ROWS BETWEEN UNBOUNDED \
             PRECEDING AND CURRENT ROW) FROM bid",
        )
        .unwrap();
        let over = unbounded.spec.operators.iter().find(|o| o.uid == "s.over").unwrap();
        assert_eq!(over.config["rows_preceding"].as_str(), Some("unbounded"));
        for (query, want) in [
            ("SELECT SUM(price) OVER (PARTITION BY auction ORDER BY `dateTime`) FROM bid", "OVER (RANGE BETWEEN"),
            ("SELECT SUM(price) OVER (PARTITION BY auction ORDER BY price ROWS 2 PRECEDING) FROM bid", "ORDER BY the rows' event time"),
            ("SELECT SUM(price) OVER (PARTITION BY auction ORDER BY `dateTime` DESC ROWS 2 PRECEDING) FROM bid", "ascending"),
            (
                "SELECT SUM(price) OVER (PARTITION BY auction ORDER BY `dateTime` ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) FROM bid",
                "is not supported yet: ROWS BETWEEN n PRECEDING",
            ),
            ("SELECT ROW_NUMBER() OVER (PARTITION BY auction ORDER BY `dateTime`) FROM bid", "ROW_NUMBER() OVER (…) is not supported yet"),
            (
                "SELECT SUM(price) OVER (PARTITION BY auction ORDER BY `dateTime` ROWS 2 PRECEDING) \
                 + SUM(price) OVER (PARTITION BY auction ORDER BY `dateTime` ROWS 3 PRECEDING) FROM bid",
                "different frames",
            ),
            (
                "SELECT SUM(n) OVER (PARTITION BY auction ORDER BY auction ROWS 2 PRECEDING) FROM \
                 (SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction)",
                "OVER over an updating table",
            ),
        ] {
            let e = over_nexmark("n BIGINT", query).map(|p| format!("{:?}", p.spec)).unwrap_err().to_string();
            assert!(e.contains(want), "{query}: want {want:?}, got {e}");
        }
    }

    #[test]
    fn window_top_n_plans_into_a_window_top() {
        let tumble = "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))";
        let raw = over_nexmark(
            "a BIGINT, p BIGINT, ws TIMESTAMP(3), we TIMESTAMP(3)",
            &format!(
                "SELECT auction, price, window_start, window_end FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY \
                 window_start, window_end ORDER BY price DESC) AS rn FROM {tumble}) WHERE rn <= 3"
            ),
        )
        .unwrap();
        let kinds: Vec<&str> = raw.spec.operators.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["nexmark", "project", "window-top", "project", "blackhole"]);
        assert_eq!(config(&raw, "s.top", "numbering"), "row_number");
        let top = raw.spec.operators.iter().find(|o| o.uid == "s.top").unwrap();
        assert_eq!(top.config["top"].as_u64(), Some(3));
        assert_eq!(top.config["window"]["tumbling_ms"].as_u64(), Some(10_000));
        assert_eq!(config(&raw, "s.top-input", "key"), "0", "one partition per window");
        let select = config(&raw, "s.select", "select");
        assert!(select.contains("window_start") && select.contains("window_end"), "{select}");
        // RANK of a window aggregate's rows, per auction bucket, the rank read where only rank 1 is kept.
        let counted = over_nexmark(
            "b BIGINT, n BIGINT, r BIGINT",
            &format!(
                "SELECT bucket, n, rk FROM (SELECT *, RANK() OVER (PARTITION BY window_start, window_end, bucket \
                 ORDER BY n DESC) AS rk FROM (SELECT MOD(auction, 10) AS bucket, auction, COUNT(*) AS n, \
                 window_start, window_end FROM {tumble} GROUP BY MOD(auction, 10), auction, window_start, \
                 window_end)) WHERE rk = 1 AND n > 1"
            ),
        )
        .unwrap();
        let top = counted.spec.operators.iter().find(|o| o.uid == "s.top").unwrap();
        assert_eq!(top.config["window"]["tumbling_ms"].as_u64(), Some(1), "the aggregate's windows, regrouped");
        assert!(!top.config.contains_key("numbering"), "RANK: ties share it");
        // Keyed by the bucket (the aggregate's first key part) and the window's start: the end is the window's.
        assert_eq!(config(&counted, "s.top-input", "key"), "window_start, key_int(\"key\", 'i,i', 1)");
        let select = config(&counted, "s.select", "select");
        assert!(select.contains("1 AS"), "the rank of rank 1: {select}");
        assert!(config(&counted, "s.select", "where").contains("> 1"), "the other condition after the ranking");
        for (query, want) in [
            (
                "SELECT auction FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn \
                 FROM bid) WHERE rn <= 3"
                    .to_string(),
                "a Top-N without a window",
            ),
            (
                format!(
                    "SELECT rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                     ORDER BY price DESC) AS rn FROM {tumble}) WHERE rn <= 3"
                ),
                "reading the rank of a Top-N",
            ),
            (
                format!(
                    "SELECT auction FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                     ORDER BY price) AS rn FROM {tumble}) WHERE rn <= 3"
                ),
                "descending",
            ),
            (
                format!(
                    "SELECT auction FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                     ORDER BY url DESC) AS rn FROM {tumble}) WHERE rn <= 3"
                ),
                "ordered by a Utf8",
            ),
            (
                "SELECT auction FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY \
                 price DESC) AS rn FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, \
                 INTERVAL '10' SECOND))) WHERE rn <= 3"
                    .to_string(),
                "a Top-N of HOP's rows",
            ),
            (
                format!(
                    "SELECT auction FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                     ORDER BY price DESC) AS rn FROM {tumble}) WHERE rn < 1"
                ),
                "keeps no row",
            ),
        ] {
            let e = over_nexmark("a BIGINT", &query).map(|p| format!("{:?}", p.spec)).unwrap_err().to_string();
            assert!(e.contains(want), "{query}: want {want:?}, got {e}");
        }
    }

    #[test]
    fn updating_results_weir_cannot_use_yet_are_refused_by_name() {
        let group = "(SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction)";
        for (query, want) in [
            (format!("SELECT MAX(n) FROM {group} GROUP BY auction"), "MAX(…) over an updating table"),
            (format!("SELECT MIN(n) FROM {group}"), "MIN(…) over an updating table"),
            (
                format!("SELECT g.n FROM {group} AS g JOIN bid AS b ON g.auction = b.auction"),
                "a join of an updating table",
            ),
            ("SELECT auction FROM bid GROUP BY auction".to_string(), "GROUP BY without an aggregate function"),
            ("SELECT COUNT(DISTINCT bidder) FROM bid GROUP BY auction".to_string(), "COUNT(DISTINCT …) in a GROUP BY"),
            ("SELECT SUM(url) FROM bid GROUP BY auction".to_string(), "Function 'sum' failed to match any signature"),
            ("SELECT STDDEV(price) FROM bid GROUP BY auction".to_string(), "STDDEV in a GROUP BY is not supported yet"),
        ] {
            let e = over_nexmark("n BIGINT", &query).map(|p| format!("{:?}", p.spec)).unwrap_err().to_string();
            assert!(e.contains(want), "{query}: want {want:?}, got {e}");
        }
    }

    #[test]
    fn an_updating_result_is_refused_by_a_sink_that_cannot_hold_its_changes() {
        let text = format!(
            "{}\nCREATE TABLE s (a BIGINT, n BIGINT) WITH ('connector' = 'filesystem', 'path' = '/tmp/x', 'format' = '{{}}');\n\
             INSERT INTO s SELECT auction, COUNT(*) FROM bid GROUP BY auction",
            nexmark("q0").split("CREATE TABLE nexmark_q0").next().unwrap_or_default()
        );
        let plan = |format: &str| plan_script(&text.replace("{}", format), &PlanOptions::default());
        let e = plan("parquet").unwrap_err().to_string();
        assert!(e.contains("format 'parquet' cannot hold its changes"), "{e}");
        assert!(plan("csv").is_ok());
    }

    #[test]
    fn time_bounds_between_the_sides_make_an_interval_join_and_the_rest_stays_a_condition() {
        let bid = "CREATE VIEW b2 AS SELECT * FROM bid;\n";
        let text = |cond: &str| {
            format!(
                "{}\n{bid}CREATE TABLE s (a BIGINT) WITH ('connector' = 'blackhole');\nINSERT INTO s SELECT x.auction \
                 FROM bid AS x JOIN b2 AS y ON x.auction = y.auction AND {cond}",
                nexmark("q0").split("CREATE TABLE nexmark_q0").next().unwrap_or_default()
            )
        };
        let plan = |cond: &str| {
            let p = plan_script(&text(cond), &PlanOptions { name: "t".into(), parallelism: Some(1) }).unwrap();
            p.spec.operators.into_iter().find(|o| o.uid == "s.join").unwrap()
        };
        // y.t − x.t in (−2 s, 5 s]: lower −1999, upper 5000.
        let j = plan("y.`dateTime` > x.`dateTime` - INTERVAL '2' SECOND AND x.`dateTime` + INTERVAL '5' SECOND >= y.`dateTime` AND x.price < y.price");
        assert_eq!(j.kind, "interval-join");
        assert_eq!((j.config["lower_ms"].as_i64(), j.config["upper_ms"].as_i64()), (Some(-1_999), Some(5_000)));
        assert_eq!(j.config["where"].as_str(), Some("(\"x.price\" < \"y.price\")"));
        // One bound only: a regular join, the whole condition its `where`.
        let j = plan("y.`dateTime` > x.`dateTime`");
        assert_eq!(j.kind, "join");
        assert_eq!(j.config["where"].as_str(), Some("(\"y.dateTime\" > \"x.dateTime\")"));
    }
}
