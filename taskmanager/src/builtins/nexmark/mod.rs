//! `nexmark`: the Nexmark event stream of `generator` (every event a pure function of its number), as
//! Flink's Nexmark table flattened into columns (`crate::builtins::nexmark::nexmark_columns`). The event numbers are
//! cut into `splits` contiguous ranges (or, with `block: B`, into blocks of B numbers dealt to the splits in
//! turn, as Flink's Nexmark source does), assigned to subtasks round-robin; each split's next number is kept in
//! operator list state, so the source resumes exactly where the checkpoint left it and its splits move to other
//! subtasks on a rescale. A subtask reads its splits in turn, a few events from each, so that every split
//! moves through event time together and the per-split watermark advances as the source does. Each event's
//! event time is its `date_time`.

pub mod generator;

use super::declare::*;
use crate::api::batch::event_time_field;
use crate::api::operator::{InitContext, OperatorError, SnapshotContext, Source, SourceOutput, SourceStatus};
use crate::api::splits::check_splits;
use crate::api::splits::{NumberedSplits, SplitLayout};
use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::{Arc, OnceLock};

use generator::{Event, EventKind, Generator};

/// The columns of a `nexmark` event, Flink's Nexmark table flattened: `event_type` (0 person, 1 auction, 2 bid),
/// `date_time`, and the fields of each kind prefixed with it (`person_*`, `auction_*`, `bid_*`), null in the
/// events of the other kinds.
pub fn nexmark_columns() -> Vec<weir_common::job::schema::Column> {
    use weir_common::job::schema::Column;
    let mut c = vec![Column::new("event_type", "int32", false), Column::new("date_time", "timestamp_ms", false)];
    for (name, t) in NEXMARK_FIELDS {
        c.push(Column::new(name, t, true));
    }
    c
}

/// The nullable columns of a `nexmark` event, in order, with their types.
pub const NEXMARK_FIELDS: [(&str, &str); 22] = [
    ("person_id", "int64"),
    ("person_name", "utf8"),
    ("person_email_address", "utf8"),
    ("person_credit_card", "utf8"),
    ("person_city", "utf8"),
    ("person_state", "utf8"),
    ("person_extra", "utf8"),
    ("auction_id", "int64"),
    ("auction_item_name", "utf8"),
    ("auction_description", "utf8"),
    ("auction_initial_bid", "int64"),
    ("auction_reserve", "int64"),
    ("auction_expires", "timestamp_ms"),
    ("auction_seller", "int64"),
    ("auction_category", "int64"),
    ("auction_extra", "utf8"),
    ("bid_auction", "int64"),
    ("bid_bidder", "int64"),
    ("bid_price", "int64"),
    ("bid_channel", "utf8"),
    ("bid_url", "utf8"),
    ("bid_extra", "utf8"),
];

/// Config of the `nexmark` source (`../shared/flink-peer/nexmark/GENERATOR.md`): events `0 … events − 1` (or
/// unbounded), cut into `splits` contiguous ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NexmarkConfig {
    /// Number of events; `None` = unbounded.
    pub events: Option<u64>,
    /// Events per second of event time (timestamps and auction lengths).
    pub tps: u64,
    /// Events per second of wall-clock time for the whole source; 0 = as fast as possible.
    pub rate_per_sec: u64,
    /// Number of splits the event numbers are cut into.
    pub splits: u32,
    /// 0: split `j` holds a contiguous range of event numbers; `B`: it holds blocks `j, j+splits, …` of B numbers.
    pub block: u64,
    /// The event mix and hot ratios.
    pub params: generator::Params,
}

/// Event numbers must convert to doubles exactly (the timeline is computed in double precision).
pub const NEXMARK_MAX_EVENTS: u64 = 1 << 53;

impl NexmarkConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field("events", "events to emit, at most 2^53 (absent: unbounded)"),
        field("tps", "events per second of event time (default 100,000)"),
        field(
            "rate_per_sec",
            "events per second of wall-clock time for the whole source (default 0: as fast as possible)",
        ),
        field("splits", "splits the event numbers are cut into, 1 to 10,000,000 (default 128)"),
        field("block", "0: each split holds a contiguous range; B: blocks of B numbers dealt round-robin (default 0)"),
        field("person_proportion", "persons in each 50 events (default 1)"),
        field("auction_proportion", "auctions in each 50 events (default 3)"),
        field("bid_proportion", "bids in each 50 events (default 46)"),
        field("hot_auction_ratio", "1 in this many bids go to a hot auction (default 2)"),
        field("hot_bidder_ratio", "1 in this many bids come from a hot bidder (default 4)"),
        field("hot_seller_ratio", "1 in this many auctions come from a hot seller (default 4)"),
    ];

    /// Reads and checks a nexmark config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let events = r.u64("events")?;
        if events.is_some_and(|e| e > NEXMARK_MAX_EVENTS) {
            return Err(field_err("events", "must be at most 2^53 (9007199254740992): event times are doubles"));
        }
        let tps = r.u64("tps")?.unwrap_or(generator::DEFAULT_TPS);
        if tps == 0 {
            return Err(field_err("tps", "must be at least 1 event per second of event time"));
        }
        let splits = check_splits(r.u64("splits")?.unwrap_or(128))?;
        let d = generator::Params::default();
        let ratio = |f: &str, default: u32| -> Result<u32, ConfigFieldError> {
            Ok(r.u64(f)?.map_or(default, |v| v.min(u32::MAX as u64) as u32))
        };
        let params = generator::Params {
            person_proportion: r.u64("person_proportion")?.unwrap_or(d.person_proportion),
            auction_proportion: r.u64("auction_proportion")?.unwrap_or(d.auction_proportion),
            bid_proportion: r.u64("bid_proportion")?.unwrap_or(d.bid_proportion),
            hot_auction_ratio: ratio("hot_auction_ratio", d.hot_auction_ratio)?,
            hot_bidder_ratio: ratio("hot_bidder_ratio", d.hot_bidder_ratio)?,
            hot_seller_ratio: ratio("hot_seller_ratio", d.hot_seller_ratio)?,
        };
        params.check().map_err(|(field, message)| field_err(field, message))?;
        Ok(NexmarkConfig {
            events,
            tps,
            rate_per_sec: r.u64("rate_per_sec")?.unwrap_or(0),
            splits,
            block: r.u64("block")?.unwrap_or(0),
            params,
        })
    }
}

const STATE: &str = "splits";
/// Events per batch a poll fills at most.
const CHUNK: usize = 1024;

/// The schema of the source's batches: the declared columns, then the event time.
pub fn nexmark_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
            let mut fields =
                vec![Field::new("event_type", DataType::Int32, false), Field::new("date_time", ts.clone(), false)];
            for (name, t) in NEXMARK_FIELDS {
                let dt = match t {
                    "int64" => DataType::Int64,
                    "timestamp_ms" => ts.clone(),
                    _ => DataType::Utf8,
                };
                fields.push(Field::new(name, dt, true));
            }
            fields.push(event_time_field());
            Arc::new(Schema::new(fields))
        })
        .clone()
}

/// The columns of a batch being filled.
struct Columns {
    event_type: Int32Builder,
    date_time: TimestampMillisecondBuilder,
    person_id: Int64Builder,
    person_strings: [StringBuilder; 6],
    auction_id: Int64Builder,
    auction_strings: [StringBuilder; 2],
    auction_prices: [Int64Builder; 2],
    auction_expires: TimestampMillisecondBuilder,
    auction_ints: [Int64Builder; 2],
    auction_extra: StringBuilder,
    bid_ints: [Int64Builder; 3],
    bid_strings: [StringBuilder; 3],
}

impl Columns {
    fn new() -> Self {
        Columns {
            event_type: Int32Builder::with_capacity(CHUNK),
            date_time: TimestampMillisecondBuilder::with_capacity(CHUNK),
            person_id: Int64Builder::new(),
            person_strings: std::array::from_fn(|_| StringBuilder::new()),
            auction_id: Int64Builder::new(),
            auction_strings: std::array::from_fn(|_| StringBuilder::new()),
            auction_prices: std::array::from_fn(|_| Int64Builder::new()),
            auction_expires: TimestampMillisecondBuilder::new(),
            auction_ints: std::array::from_fn(|_| Int64Builder::new()),
            auction_extra: StringBuilder::new(),
            bid_ints: std::array::from_fn(|_| Int64Builder::new()),
            bid_strings: std::array::from_fn(|_| StringBuilder::new()),
        }
    }

    fn push(&mut self, e: &Event) {
        self.event_type.append_value(e.kind.number());
        self.date_time.append_value(e.date_time);
        let (person, auction, bid) =
            (e.kind == EventKind::Person, e.kind == EventKind::Auction, e.kind == EventKind::Bid);
        let p = &e.person;
        self.person_id.append_option(person.then_some(p.id));
        for (b, v) in
            self.person_strings.iter_mut().zip([&p.name, &p.email_address, &p.credit_card, &p.city, &p.state, &p.extra])
        {
            b.append_option(person.then_some(v));
        }
        let a = &e.auction;
        self.auction_id.append_option(auction.then_some(a.id));
        for (b, v) in self.auction_strings.iter_mut().zip([&a.item_name, &a.description]) {
            b.append_option(auction.then_some(v));
        }
        for (b, v) in self.auction_prices.iter_mut().zip([a.initial_bid, a.reserve]) {
            b.append_option(auction.then_some(v));
        }
        self.auction_expires.append_option(auction.then_some(a.expires));
        for (b, v) in self.auction_ints.iter_mut().zip([a.seller, a.category]) {
            b.append_option(auction.then_some(v));
        }
        self.auction_extra.append_option(auction.then_some(&a.extra));
        let d = &e.bid;
        for (b, v) in self.bid_ints.iter_mut().zip([d.auction, d.bidder, d.price]) {
            b.append_option(bid.then_some(v));
        }
        for (b, v) in self.bid_strings.iter_mut().zip([&d.channel, &d.url, &d.extra]) {
            b.append_option(bid.then_some(v));
        }
    }

    /// The batch of the events pushed since the last one (schema order: `nexmark_schema`).
    fn finish(&mut self) -> Result<RecordBatch, OperatorError> {
        let date_time = Arc::new(self.date_time.finish());
        let mut c: Vec<ArrayRef> = vec![Arc::new(self.event_type.finish()), date_time.clone()];
        c.push(Arc::new(self.person_id.finish()));
        c.extend(self.person_strings.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        c.push(Arc::new(self.auction_id.finish()));
        c.extend(self.auction_strings.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        c.extend(self.auction_prices.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        c.push(Arc::new(self.auction_expires.finish()));
        c.extend(self.auction_ints.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        c.push(Arc::new(self.auction_extra.finish()));
        c.extend(self.bid_ints.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        c.extend(self.bid_strings.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        // The event time is the event's date_time.
        c.push(date_time);
        RecordBatch::try_new(nexmark_schema(), c).map_err(|e| OperatorError::Records(format!("nexmark batch: {e}")))
    }
}

/// The nexmark source.
pub struct Nexmark {
    cfg: NexmarkConfig,
    generator: Generator,
    event: Event,
    columns: Columns,
    splits: NumberedSplits,
}

impl Nexmark {
    /// A source with the given config.
    pub fn new(cfg: NexmarkConfig) -> Self {
        Nexmark {
            generator: Generator::with_params(cfg.tps, cfg.params),
            cfg,
            event: Event::default(),
            columns: Columns::new(),
            splits: NumberedSplits::default(),
        }
    }
}

impl Source for Nexmark {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let c = &self.cfg;
        let layout = SplitLayout::from_block(c.block);
        self.splits.initialize(ctx, STATE, "nexmark", c.splits, layout, c.events, c.rate_per_sec)
    }

    fn splits(&self) -> u32 {
        self.splits.len() as u32
    }

    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError> {
        let budget = match self.splits.budget(max.min(CHUNK)) {
            Ok(b) => b,
            Err(wait) => return Ok(SourceStatus::Idle(wait)),
        };
        let (generator, event, columns) = (&mut self.generator, &mut self.event, &mut self.columns);
        let (layout, count) = self.splits.layout();
        let (runs, left) = self.splits.take(out, budget, true, |split, range| {
            for pos in range {
                generator.event(layout.number(split.id, count, pos), event);
                columns.push(event);
            }
        });
        if !runs.is_empty() {
            out.push_batch_of_splits(self.columns.finish()?, runs)?;
        }
        if left > 0 && out.is_empty() {
            return Ok(SourceStatus::Finished);
        }
        Ok(SourceStatus::More)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        self.splits.snapshot(ctx, STATE)
    }
}

/// The `nexmark` kind: the Nexmark event stream of persons, auctions and bids.
pub struct NexmarkKind;

impl Kind for NexmarkKind {
    type Config = NexmarkConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "nexmark",
            Role::Source,
            false,
            "The Nexmark event stream of persons, auctions and bids",
            NexmarkConfig::FIELDS,
        )
        .with_states(&[("splits", StateClass::OperatorList, "(u32, u64)")])
        .with_output(OutputSchema::Columns(nexmark_columns()))
    }

    fn signature(&self) -> Option<StateSignature> {
        // A split's id and next event number.
        Some(StateSignature::unkeyed().operator_list::<(u32, u64)>("splits"))
    }

    fn config(&self, config: &OperatorConfig) -> Result<NexmarkConfig, ConfigFieldError> {
        NexmarkConfig::from_map(config)
    }

    fn build(&self, config: NexmarkConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Source(Box::new(Nexmark::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operator::{init_source, snapshot_source, RuntimeInfo};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
    use arrow_array::Array;
    use generator::DEFAULT_TPS;
    use std::collections::BTreeMap;
    use weir_state::OperatorStateStore;

    fn info(subtask: u32, p: u32) -> RuntimeInfo {
        RuntimeInfo::for_test(subtask, p)
    }

    /// The canonical line (GENERATOR.md §7) of row `i` of a batch, read back from its columns.
    fn line(b: &RecordBatch, i: usize) -> String {
        let int = |name: &str| b.column_by_name(name).unwrap().as_primitive::<Int64Type>().value(i);
        let ts = |name: &str| b.column_by_name(name).unwrap().as_primitive::<TimestampMillisecondType>().value(i);
        let s = |name: &str| b.column_by_name(name).unwrap().as_string::<i32>().value(i).to_string();
        let kind = b.column_by_name("event_type").unwrap().as_primitive::<Int32Type>().value(i);
        let t = ts("date_time");
        assert_eq!(b.column_by_name("_event_time").unwrap().as_primitive::<TimestampMillisecondType>().value(i), t);
        let rest = match kind {
            0 => {
                assert!(b.column_by_name("bid_price").unwrap().is_null(i));
                format!(
                    "P|{t}|{}|{}|{}|{}|{}|{}|{}",
                    int("person_id"),
                    s("person_name"),
                    s("person_email_address"),
                    s("person_credit_card"),
                    s("person_city"),
                    s("person_state"),
                    s("person_extra")
                )
            }
            1 => format!(
                "A|{t}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                int("auction_id"),
                s("auction_item_name"),
                s("auction_description"),
                int("auction_initial_bid"),
                int("auction_reserve"),
                ts("auction_expires"),
                int("auction_seller"),
                int("auction_category"),
                s("auction_extra")
            ),
            _ => {
                assert!(b.column_by_name("person_id").unwrap().is_null(i));
                format!(
                    "B|{t}|{}|{}|{}|{}|{}|{}",
                    int("bid_auction"),
                    int("bid_bidder"),
                    int("bid_price"),
                    s("bid_channel"),
                    s("bid_url"),
                    s("bid_extra")
                )
            }
        };
        rest
    }

    fn drain(src: &mut Nexmark, limit: usize, lines: &mut Vec<String>) -> Result<usize, OperatorError> {
        let mut n = 0;
        while n < limit {
            let mut out = SourceOutput::default();
            if src.poll(&mut out, 97.min(limit - n))? == SourceStatus::Finished {
                break;
            }
            for c in out.take().0 {
                for i in 0..c.batch.num_rows() {
                    lines.push(line(&c.batch, i));
                }
                n += c.batch.num_rows();
            }
        }
        Ok(n)
    }

    #[test]
    fn subtasks_emit_the_spec_stream_and_resume_from_state() -> Result<(), OperatorError> {
        for block in ["0", "13"] {
            every_event_once(block)?;
        }
        Ok(())
    }

    fn every_event_once(block: &str) -> Result<(), OperatorError> {
        let map = BTreeMap::from([
            ("events".into(), "3000".into()),
            ("splits".into(), "7".into()),
            ("block".into(), block.into()),
        ]);
        let cfg = NexmarkConfig::from_map(&map).map_err(|e| OperatorError::Records(e.to_string()))?;
        let mut got = Vec::new();
        for sub in 0..3 {
            let mut store = OperatorStateStore::new();
            let i = info(sub, 3);
            let mut src = Nexmark::new(cfg.clone());
            init_source(&mut src, &i, &mut store, false)?;
            drain(&mut src, 400, &mut got)?;
            snapshot_source(&mut src, &mut store)?;
            let mut again = Nexmark::new(cfg.clone());
            init_source(&mut again, &i, &mut store, true)?;
            drain(&mut again, usize::MAX, &mut got)?;
        }
        // Every event once, each as the generator makes it.
        let (mut g, mut e) = (Generator::new(DEFAULT_TPS), Event::default());
        let mut want: Vec<String> = (0..3000)
            .map(|n| {
                g.event(n, &mut e);
                let mut s = String::new();
                e.write_canonical(&mut s);
                s.split_once('|').map(|(_, rest)| rest.to_string()).unwrap_or_default()
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got.len(), 3000);
        assert!(got == want, "block {block}: the source's events differ from the generator's");
        Ok(())
    }
}

#[cfg(test)]
mod sql_shape_tests {
    /// Every field of the SQL `nexmark` table (`weir_sql`'s connector) reads a column this kind emits, of the
    /// type the table declares: the two sides cannot drift apart.
    #[test]
    fn the_sql_tables_fields_read_columns_of_this_kind() {
        use weir_sql::script::connectors::{NexmarkType, NEXMARK_SHAPE};
        let columns = super::nexmark_columns();
        for (row, _, fields) in NEXMARK_SHAPE {
            for (field, column, t) in fields {
                let name = column.unwrap_or("date_time");
                let c = columns.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("{row}.{field}: no {name}"));
                let want = match t {
                    NexmarkType::Int64 => "int64",
                    NexmarkType::Utf8 => "utf8",
                    NexmarkType::Timestamp => "timestamp_ms",
                };
                assert_eq!(c.data_type, want, "{row}.{field}");
            }
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn nexmark_defaults_and_errors() {
        let c = NexmarkConfig::from_map(&m(&[("events", "2_000_000")])).unwrap();
        assert_eq!((c.events, c.tps, c.rate_per_sec, c.splits), (Some(2_000_000), 100_000, 0, 128));
        assert_eq!(c.params, generator::Params::default());
        let field = |pairs: &[(&str, &str)]| NexmarkConfig::from_map(&m(pairs)).unwrap_err().field;
        assert_eq!(field(&[("tps", "0")]), "tps");
        assert_eq!(field(&[("tps", "-5")]), "tps");
        assert_eq!(field(&[("rate_per_sec", "-1")]), "rate_per_sec");
        assert_eq!(field(&[("events", "9007199254740993")]), "events");
        assert!(NexmarkConfig::from_map(&m(&[("events", "9007199254740992")])).is_ok());
        assert_eq!(
            field(&[("person_proportion", "0"), ("auction_proportion", "0"), ("bid_proportion", "0")]),
            "person_proportion"
        );
        assert_eq!(field(&[("person_proportion", "0")]), "person_proportion");
        assert_eq!(field(&[("auction_proportion", "0")]), "auction_proportion");
        assert_eq!(field(&[("hot_bidder_ratio", "0")]), "hot_bidder_ratio");
        assert_eq!(field(&[("splits", "0")]), "splits");
        assert_eq!(field(&[("tsp", "10")]), "tsp");
        // Persons only, or persons and auctions, are streams too.
        assert!(NexmarkConfig::from_map(&m(&[("auction_proportion", "0"), ("bid_proportion", "0")])).is_ok());
        assert!(NexmarkConfig::from_map(&m(&[("tps", "0")])).is_err());
    }
}
