//! Nexmark queries as the project ships them (`bench/nexmark/qN.yaml`), set up for one run: the stream's size
//! and layout, the parallelism, and a blackhole or an exactly-once `file-sink`; and the results they must give
//! (`bench/nexmark/expected/`, Flink's results over the same stream).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The queries `bench/nexmark/` holds, in order.
pub const QUERIES: &[&str] = &["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q11"];

/// The stream the expected results are of: events, events per second of event time, parallelism (one split
/// per subtask, contiguous).
pub const EXPECTED_STREAM: (u64, u64, u32) = (200_000, 2_000, 2);

/// The folder of the query specs.
pub fn specs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/nexmark")
}

/// How to run a query.
#[derive(Clone, Debug)]
pub struct QueryRun {
    /// `q0`, `q1`, …
    pub query: String,
    /// Events the source generates.
    pub events: u64,
    /// Events per second of event time.
    pub tps: u64,
    /// Parallelism of every operator (and the source's split count, as Flink's Nexmark source has one split
    /// per subtask), unless `splits` says otherwise.
    pub parallelism: u32,
    /// The source's splits [default: the parallelism].
    pub splits: Option<u32>,
    /// Source layout: 0 contiguous, B blocks of B events.
    pub block: u64,
    /// Wall-clock limit of the whole source, events/s (0: none).
    pub rate_per_sec: u64,
    /// Checkpoint interval, ms.
    pub checkpoint_ms: u64,
    /// Where the results go: `None` a blackhole, else an exactly-once `file-sink` writing there.
    pub output: Option<PathBuf>,
}

impl QueryRun {
    /// A run of `query` over the stream the expected results are of, into a blackhole.
    pub fn new(query: &str) -> Self {
        let (events, tps, parallelism) = EXPECTED_STREAM;
        QueryRun {
            query: query.into(),
            events,
            tps,
            parallelism,
            splits: None,
            block: 0,
            rate_per_sec: 0,
            checkpoint_ms: 10_000,
            output: None,
        }
    }

    /// The job spec of this run: the query's spec with the source, parallelism, checkpoints and sink set.
    pub fn spec(&self) -> Result<weir_proto::JobSpec> {
        let path = specs_dir().join(format!("{}.yaml", self.query));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut spec = weir_common::job::spec::parse_spec_text(&text).with_context(|| format!("{}", path.display()))?;
        spec.name = format!("nexmark-{}", self.query);
        spec.parallelism = Some(self.parallelism);
        if let Some(c) = spec.checkpointing.as_mut() {
            c.interval_ms = Some(self.checkpoint_ms);
        }
        let source =
            spec.operators.iter_mut().find(|o| o.kind == "nexmark").context("the spec has no nexmark source")?;
        let splits = self.splits.unwrap_or(self.parallelism);
        for (k, v) in [
            ("events", self.events),
            ("tps", self.tps),
            ("splits", u64::from(splits)),
            ("block", self.block),
            ("rate_per_sec", self.rate_per_sec),
        ] {
            source.config.insert(k.into(), v.into());
        }
        if let Some(dir) = &self.output {
            let sink =
                spec.operators.iter_mut().find(|o| o.kind == "blackhole").context("the spec has no blackhole")?;
            sink.kind = "file-sink".into();
            sink.config.insert("path".into(), dir.display().to_string().into());
        }
        Ok(spec)
    }
}

/// The queries whose Flink SQL text (`bench/nexmark/sql/queries/`) Weir runs so far.
pub const SQL_QUERIES: &[&str] = &["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11"];

impl QueryRun {
    /// The Flink SQL script of this run: `bench/nexmark/sql`'s table, views and query as Flink's side runs them,
    /// the placeholders filled and the connector options set (`splits` and `rate_per_sec` of Weir's `nexmark`
    /// connector; a `filesystem` sink where `output` is set, else a `blackhole`), after `SET`s of the
    /// parallelism, the checkpoint interval and RocksDB.
    pub fn sql(&self) -> Result<String> {
        let path = specs_dir().join("sql").join("queries").join(format!("{}.sql", self.query));
        let query = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        self.sql_of(&query)
    }

    /// [`QueryRun::sql`] with the query (its sink table and `INSERT`) `query` instead of the run's.
    pub fn sql_of(&self, query: &str) -> Result<String> {
        let dir = specs_dir().join("sql");
        let read = |p: PathBuf| std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()));
        let sink = match &self.output {
            Some(d) => format!("'connector' = 'filesystem', 'path' = '{}'", d.display()),
            None => "'connector' = 'blackhole'".to_string(),
        };
        let splits = self.splits.unwrap_or(self.parallelism);
        let text = format!(
            "SET 'parallelism.default' = '{}';\nSET 'execution.checkpointing.interval' = '{} ms';\n\
             SET 'state.backend.type' = 'rocksdb';\n{}\n{}\n{}",
            self.parallelism,
            self.checkpoint_ms,
            read(dir.join("source.sql"))?,
            read(dir.join("views.sql"))?,
            query,
        );
        Ok(text
            .replace(
                "'block' = '${BLOCK}'",
                &format!("'block' = '{}', 'splits' = '{splits}', 'rate_per_sec' = '{}'", self.block, self.rate_per_sec),
            )
            .replace("${EVENTS}", &self.events.to_string())
            .replace("${TPS}", &self.tps.to_string())
            .replace("${SINK}", &sink))
    }
}

/// The rows a `file-sink` committed under `dir` (hidden in-progress files aside), sorted by their bytes. An
/// updating result's lines start with their change (`+I,` `-U,` `+U,` `-D,`): the changes are applied in file
/// order, as a multiset, and the rows left are the result.
pub fn committed_rows(dir: &Path) -> Result<Vec<String>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        if !e.file_name().to_string_lossy().starts_with('.') {
            files.push(e.path());
        }
    }
    // Files are named by subtask and checkpoint: in name order, a subtask's changes come in the order made.
    files.sort();
    let mut plain = Vec::new();
    let mut changed: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for f in files {
        for line in std::fs::read_to_string(&f)?.lines() {
            match line.split_at_checked(3) {
                Some(("+I," | "+U,", row)) => *changed.entry(row.to_string()).or_insert(0) += 1,
                Some(("-U," | "-D,", row)) => *changed.entry(row.to_string()).or_insert(0) -= 1,
                _ => plain.push(line.to_string()),
            }
        }
    }
    if let Some((row, n)) = changed.iter().find(|(_, n)| **n < 0) {
        anyhow::bail!("{} retracted {} more time(s) than it was added", row, -n);
    }
    for (row, n) in changed {
        plain.extend(std::iter::repeat_n(row, n as usize));
    }
    plain.sort_unstable();
    Ok(plain)
}

/// `rows=<n> sha256=<hex>` of sorted rows, each followed by a newline (the form of `expected/qN.digest`).
pub fn digest(rows: &[String]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for r in rows {
        ctx.update(r.as_bytes());
        ctx.update(b"\n");
    }
    let hex: String = ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("rows={} sha256={hex}", rows.len())
}

/// q6's result over the stream of `events` events at `tps`, computed here from the generator (Flink cannot run
/// q6, so there is no result of its to keep): per auction, the highest price among its bids made from its own time
/// to its expiry (both included), final at its expiry; auctions in order of expiry, then id; per seller, the
/// average (an integer, rounded toward zero) of the final prices of its last 10 closed auctions, one row
/// `seller,avg` per closed auction with a bid. Rows sorted by their bytes.
pub fn reference_q6(events: u64, tps: u64) -> Vec<String> {
    use std::collections::{HashMap, VecDeque};
    use weir_taskmanager::builtins::nexmark::generator::{Event, EventKind, Generator};
    let mut g = Generator::new(tps);
    let mut e = Event::default();
    // auction id -> (opens, expires, seller); auction id -> best price.
    let mut auctions: HashMap<i64, (i64, i64, i64)> = HashMap::new();
    let mut bids: Vec<(i64, i64, i64)> = Vec::new();
    for n in 0..events {
        g.event(n, &mut e);
        match e.kind {
            EventKind::Auction => {
                auctions.insert(e.auction.id, (e.date_time, e.auction.expires, e.auction.seller));
            }
            EventKind::Bid => bids.push((e.bid.auction, e.date_time, e.bid.price)),
            EventKind::Person => {}
        }
    }
    let mut best: HashMap<i64, i64> = HashMap::new();
    for (auction, time, price) in bids {
        if let Some(&(opens, expires, _)) = auctions.get(&auction) {
            if opens <= time && time <= expires {
                let b = best.entry(auction).or_insert(price);
                *b = (*b).max(price);
            }
        }
    }
    let mut closed: Vec<(i64, i64, i64, i64)> =
        best.iter().map(|(id, price)| (auctions[id].1, *id, auctions[id].2, *price)).collect();
    closed.sort_unstable();
    let mut last: HashMap<i64, VecDeque<i64>> = HashMap::new();
    let mut rows = Vec::with_capacity(closed.len());
    for (_, _, seller, price) in closed {
        let prices = last.entry(seller).or_default();
        prices.push_back(price);
        if prices.len() > 10 {
            prices.pop_front();
        }
        rows.push(format!("{seller},{}", prices.iter().sum::<i64>() / prices.len() as i64));
    }
    rows.sort_unstable();
    rows
}

/// The SQL query [`reference_recent_counts`] is the result of: bids per bucket of auctions (`auction % 10`) and
/// 10 s tumbling window, each with an `OVER` sum of its bucket's last 3 windows' counts (the table
/// `recent_counts` is created with the sink's options).
pub const RECENT_COUNTS_SQL: &str = "CREATE TABLE recent_counts (bucket BIGINT, num BIGINT, recent BIGINT) \
    WITH (${SINK});\n\
    INSERT INTO recent_counts\n\
    SELECT bucket, num, SUM(num) OVER (PARTITION BY bucket ORDER BY window_time ROWS BETWEEN 2 PRECEDING AND \
    CURRENT ROW)\n\
    FROM (\n\
      SELECT MOD(auction, 10) AS bucket, COUNT(*) AS num, window_start, window_end, window_time\n\
      FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))\n\
      GROUP BY MOD(auction, 10), window_start, window_end, window_time\n\
    );\n";

/// [`RECENT_COUNTS_SQL`]'s result over the stream of `events` events at `tps`, computed here from the generator
/// (Flink's side has no such query): rows `bucket,num,recent`, sorted by their bytes.
pub fn reference_recent_counts(events: u64, tps: u64) -> Vec<String> {
    use std::collections::BTreeMap;
    use weir_taskmanager::builtins::nexmark::generator::{Event, EventKind, Generator};
    let mut g = Generator::new(tps);
    let mut e = Event::default();
    // (bucket, window) -> bids; in key order, each bucket's windows in time order.
    let mut counts: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for n in 0..events {
        g.event(n, &mut e);
        if e.kind == EventKind::Bid {
            *counts.entry((e.bid.auction % 10, e.date_time.div_euclid(10_000))).or_default() += 1;
        }
    }
    let mut rows = Vec::with_capacity(counts.len());
    let mut last: Vec<i64> = Vec::new();
    let mut bucket = None;
    for ((b, _), num) in counts {
        if bucket != Some(b) {
            bucket = Some(b);
            last.clear();
        }
        last.push(num);
        let recent: i64 = last.iter().rev().take(3).sum();
        rows.push(format!("{b},{num},{recent}"));
    }
    rows.sort_unstable();
    rows
}

/// The SQL query [`reference_top_prices`] is the result of: Flink's window Top-N, per 10 s tumbling window the bids
/// of the three highest prices (`RANK`: bids of equal price share a rank, so a tie keeps them all), each with its
/// auction, price and window end (the table `top_prices` is created with the sink's options).
pub const TOP_PRICES_SQL: &str = "CREATE TABLE top_prices (auction BIGINT, price BIGINT, window_end TIMESTAMP(3)) \
    WITH (${SINK});\n\
    INSERT INTO top_prices\n\
    SELECT auction, price, window_end FROM (\n\
      SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rk\n\
      FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))\n\
    ) WHERE rk <= 3;\n";

/// [`TOP_PRICES_SQL`]'s result over the stream of `events` events at `tps`, computed here from the generator:
/// rows `auction,price,window_end` (ms), sorted by their bytes.
pub fn reference_top_prices(events: u64, tps: u64) -> Vec<String> {
    use std::collections::BTreeMap;
    use weir_taskmanager::builtins::nexmark::generator::{Event, EventKind, Generator};
    let mut g = Generator::new(tps);
    let mut e = Event::default();
    let mut windows: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for n in 0..events {
        g.event(n, &mut e);
        if e.kind == EventKind::Bid {
            windows.entry(e.date_time.div_euclid(10_000)).or_default().push((e.bid.price, e.bid.auction));
        }
    }
    let mut rows = Vec::new();
    for (w, bids) in windows {
        for &(price, auction) in &bids {
            let rank = 1 + bids.iter().filter(|(p, _)| *p > price).count();
            if rank <= 3 {
                rows.push(format!("{auction},{price},{}", (w + 1) * 10_000));
            }
        }
    }
    rows.sort_unstable();
    rows
}

/// The expected digest of `query` over [`EXPECTED_STREAM`], and its rows where the project keeps them (q6's
/// computed by [`reference_q6`]).
pub fn expected(query: &str) -> Result<(String, Option<Vec<String>>)> {
    if query == "q6" {
        let rows = reference_q6(EXPECTED_STREAM.0, EXPECTED_STREAM.1);
        return Ok((digest(&rows), Some(rows)));
    }
    let dir = specs_dir().join("expected");
    let digest = std::fs::read_to_string(dir.join(format!("{query}.digest")))
        .with_context(|| format!("no expected result for {query}"))?;
    let rows =
        std::fs::read_to_string(dir.join(format!("{query}.csv"))).ok().map(|t| t.lines().map(str::to_string).collect());
    Ok((digest.trim().to_string(), rows))
}

/// Checks the rows committed under `dir` against the expected result of `query`, saying what differs.
pub fn check_result(query: &str, dir: &Path) -> Result<()> {
    let rows = committed_rows(dir)?;
    let got = digest(&rows);
    let (want, want_rows) = expected(query)?;
    if got == want {
        return Ok(());
    }
    let mut detail = String::new();
    if let Some(w) = want_rows {
        let missing: Vec<&String> = w.iter().filter(|r| rows.binary_search(r).is_err()).take(5).collect();
        let extra: Vec<&String> = rows.iter().filter(|r| w.binary_search(r).is_err()).take(5).collect();
        detail = format!("; missing {missing:?}; not expected {extra:?}");
    } else if let Some(first) = rows.first() {
        detail = format!("; first row {first:?}");
    }
    anyhow::bail!("{query}: got {got}, the expected result is {want}{detail}")
}
