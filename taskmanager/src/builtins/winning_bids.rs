//! `winning-bids`: Nexmark's winning bids (q6's first step, query-specific). Auctions (first input) and bids
//! (second), keyed by auction. Per key, the auction — its own event time, its closing time and its row —, and
//! the highest bid so far that came while it was open, are one value each; a bid costs one or two reads and, when
//! it leads, one write. An event-time timer at the closing time emits the auction and its winning bid (gathered
//! per watermark, emitted in `on_watermark`) and clears the key.
//!
//! Bids can come before their auction (parallel sources, or a split that runs ahead): they wait in a list, with a
//! timer at their own time. When the auction comes they are judged; a bid whose auction has not come by the time
//! the watermark passes it never counts (the auction, opened no later than the bid, would have come) and goes.

use super::aggregate::{check_column, INTEGERS, TIMES};
use super::declare::*;
use super::relational::joined::{Plan, Shape};
use super::relational::{ready, times, Inputs, Relational, EMIT_AT};
use crate::api::batch::int_column;
use crate::api::batch::{key_groups, keys, set_current_key_of_row};
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::{encode_row, RowsBuilder};
use crate::builtins::join::JoinConfig;
use arrow_array::builder::{BinaryBuilder, TimestampMillisecondBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use std::sync::Arc;
use weir_state::{KeyedStateBackend, ListState, StateId, StateKind};

/// Config of the `winning-bids` kind (Nexmark's winning bids, q6's first step): two inputs keyed alike,
/// auctions first and bids second. A bid counts for its key's auction when its event time is within the
/// auction's own event time and the auction's `closes` (a timestamp column of the first input), both ends
/// included; when the watermark passes `closes`, the auction is emitted with its highest bid by `by` (an
/// integer column of the second input; of equal bids the earliest, then the first to arrive), at event time
/// `closes`: the key, the auction's columns, the bid's. An auction without a bid emits nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WinningBidsConfig {
    /// The first input's column of the time its rows close.
    pub closes: String,
    /// The second input's column that ranks its rows.
    pub by: String,
}

impl WinningBidsConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("closes", "the first input's timestamp column at which an auction closes (required)"),
        state_field("by", "the second input's integer column the highest bid is chosen by (required)"),
    ];

    /// Reads and checks a winning-bids config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let closes =
            r.string("closes")?.ok_or_else(|| field_err("closes", "is required: the auction's closing time"))?;
        let by = r.string("by")?.ok_or_else(|| field_err("by", "is required: the bid's column to rank by"))?;
        Ok(WinningBidsConfig { closes, by })
    }

    /// The columns it emits over inputs of `first` and `second`: the key, the first's, the second's.
    pub fn output(
        &self,
        first: &[weir_common::job::schema::Column],
        second: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        check_column(first, &self.closes, TIMES, "closes", "the first input")?;
        check_column(second, &self.by, INTEGERS, "by", "the second input")?;
        JoinConfig::joined_columns(first, second)
    }
}

const KIND: &str = "winning-bids";
const AUCTION: &str = "winning-bids-auction";
const BEST: &str = "winning-bids-best";
const EARLY: &str = "winning-bids-early";
const COLUMNS_STATE: &str = "winning-bids-columns";

/// Two little-endian `i64`s, then a stored row: an auction (opens, closes) or a bid (`by`, time).
fn pair(bytes: &[u8]) -> Result<(i64, i64, &[u8]), OperatorError> {
    let bad = || OperatorError::UnreadableState("winning-bids: a stored row is corrupt".into());
    let a = bytes.get(..8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes).ok_or_else(bad)?;
    let b = bytes.get(8..16).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes).ok_or_else(bad)?;
    Ok((a, b, &bytes[16..]))
}

fn write_pair(a: i64, b: i64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&a.to_le_bytes());
    out.extend_from_slice(&b.to_le_bytes());
}

/// The plan of winners' rows over both inputs' kept columns: the key, the auction's columns, the bid's.
fn winner_plan(kept: &[SchemaRef]) -> Result<Plan, OperatorError> {
    Plan::new(Shape::default(), &kept[0], &kept[1], &[])
}

/// Whether a bid `(by, time)` beats the best so far: a higher `by`, or an equal one made earlier.
fn beats(by: i64, time: i64, best: Option<(i64, i64)>) -> bool {
    best.is_none_or(|(b, t)| by > b || (by == b && time < t))
}

/// Winners fired and not yet emitted.
struct Fired {
    keys: BinaryBuilder,
    auctions: RowsBuilder,
    bids: RowsBuilder,
    times: TimestampMillisecondBuilder,
    len: usize,
}

/// The winning-bids operator.
pub struct WinningBids {
    cfg: WinningBidsConfig,
    states: Option<States>,
    /// Both inputs' columns, and the plan of the joined rows (its schema) built of them.
    inputs: Inputs<Plan>,
    fired: Option<Fired>,
    /// Buffers reused from row to row: a row being stored, and a timer's auction and winning bid.
    row: Vec<u8>,
    auction_row: Vec<u8>,
    winner_row: Vec<u8>,
    /// Bids read back from the early list.
    waiting: Vec<Vec<u8>>,
}

/// The keyed states, once registered.
struct States {
    auction: StateId,
    best: StateId,
    early: ListState<Vec<u8>>,
}

impl WinningBids {
    /// A winning-bids operator with the given config.
    pub fn new(cfg: WinningBidsConfig) -> Self {
        WinningBids {
            cfg,
            states: None,
            inputs: Inputs::named(
                Self::KIND,
                COLUMNS_STATE,
                [("first", "the auctions (first input)".into()), ("second", "the bids (second input)".into())],
            ),
            fired: None,
            row: Vec::new(),
            auction_row: Vec::new(),
            winner_row: Vec::new(),
            waiting: Vec::new(),
        }
    }

    fn auctions(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext<'_>) -> Result<(), OperatorError> {
        let own = self.inputs.read(0, batch)?;
        let closes = int_column(batch, &self.cfg.closes, KIND)?;
        let times = times(batch, KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let States { auction, best, early } = ready(&mut self.states, KIND)?;
        let (auction, best, row, waiting) = (*auction, *best, &mut self.row, &mut self.waiting);
        let mut timers = ctx.timers()?;
        for (i, closes) in closes.into_iter().enumerate() {
            let (Some(closes), true) = (closes, times.is_valid(i)) else { continue };
            let opens = times.value(i);
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            write_pair(opens, closes, row);
            encode_row(&own, i, row);
            backend.put_value(auction, row)?;
            timers.register_event_time_timer(closes)?;
            // Bids that came first: the best of those made while the auction was open.
            let backend = timers.keyed();
            waiting.clear();
            early.visit_encoded(backend, &mut |e| {
                waiting.push(e.to_vec());
                Ok(())
            })?;
            if waiting.is_empty() {
                continue;
            }
            early.clear(backend)?;
            let mut lead: Option<(i64, i64, &[u8])> = match backend.get_value(best)? {
                Some(b) => Some(pair(b).map(|(by, t, _)| (by, t, &[][..]))?),
                None => None,
            };
            let mut changed = false;
            for w in waiting.iter() {
                let (time, by, _) = pair(w)?;
                if (opens..=closes).contains(&time) && beats(by, time, lead.map(|(b, t, _)| (b, t))) {
                    lead = Some((by, time, w.as_slice()));
                    changed = true;
                }
            }
            if let (true, Some((by, time, w))) = (changed, lead) {
                write_pair(by, time, row);
                row.extend_from_slice(&w[16..]);
                backend.put_value(best, row)?;
            }
        }
        Ok(())
    }

    fn bids(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext<'_>) -> Result<(), OperatorError> {
        let own = self.inputs.read(1, batch)?;
        let by = int_column(batch, &self.cfg.by, KIND)?;
        let times = times(batch, KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let States { auction, best, early } = ready(&mut self.states, KIND)?;
        let (auction, best, row) = (*auction, *best, &mut self.row);
        let watermark = ctx.current_watermark();
        let mut timers = ctx.timers()?;
        for (i, by) in by.into_iter().enumerate() {
            let (Some(by), true) = (by, times.is_valid(i)) else { continue };
            let time = times.value(i);
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            let open = match backend.get_value(auction)? {
                Some(a) => {
                    let (opens, closes, _) = pair(a)?;
                    Some((opens..=closes).contains(&time))
                }
                None => None,
            };
            match open {
                Some(false) => {}
                Some(true) => {
                    let lead = match backend.get_value(best)? {
                        Some(b) => Some(pair(b).map(|(b, t, _)| (b, t))?),
                        None => None,
                    };
                    if beats(by, time, lead) {
                        write_pair(by, time, row);
                        encode_row(&own, i, row);
                        backend.put_value(best, row)?;
                    }
                }
                None if time <= watermark => {}
                None => {
                    write_pair(time, by, row);
                    encode_row(&own, i, row);
                    early.add(backend, row)?;
                    timers.register_event_time_timer(time)?;
                }
            }
        }
        Ok(())
    }
}

impl Relational for WinningBids {
    const KIND: &'static str = KIND;
    type Built = Plan;

    fn inputs(&mut self) -> &mut Inputs<Plan> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.states = Some(States {
            auction: keyed.register_state(AUCTION, StateKind::Value)?,
            best: keyed.register_state(BEST, StateKind::Value)?,
            early: ListState::register(keyed, EARLY)?,
        });
        Ok(())
    }

    fn process(
        &mut self,
        s: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        match s {
            0 => self.auctions(batch, ctx),
            _ => self.bids(batch, ctx),
        }
    }

    fn fire(
        &mut self,
        timestamp: i64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let States { auction, best, early } = ready(&mut self.states, KIND)?;
        let backend = ctx.keyed()?;
        self.auction_row.clear();
        let closes = match backend.get_value(*auction)? {
            Some(a) => {
                self.auction_row.extend_from_slice(a);
                Some(pair(a)?.1)
            }
            None => None,
        };
        match closes {
            // The timer of a bid that came early, whose auction has come since: nothing to do.
            Some(c) if c != timestamp => return Ok(()),
            Some(_) => {}
            None => {
                // Bids that came early and whose auction has not come by their own time never count.
                let later = &mut self.waiting;
                later.clear();
                let mut corrupt = None;
                early.visit_encoded(backend, &mut |e| {
                    match pair(e) {
                        Ok((time, _, _)) if time > timestamp => later.push(e.to_vec()),
                        Ok(_) => {}
                        Err(err) => corrupt = Some(err),
                    }
                    Ok(())
                })?;
                if let Some(err) = corrupt {
                    return Err(err);
                }
                early.update(backend, later)?;
                return Ok(());
            }
        }
        self.winner_row.clear();
        let won = match backend.get_value(*best)? {
            Some(w) => {
                self.winner_row.extend_from_slice(w);
                true
            }
            None => false,
        };
        backend.delete_value(*auction)?;
        backend.delete_value(*best)?;
        early.clear(backend)?;
        if !won {
            return Ok(());
        }
        self.inputs.built(winner_plan)?;
        if self.fired.is_none() {
            self.fired = Some(Fired {
                keys: BinaryBuilder::new(),
                auctions: RowsBuilder::new(self.inputs.stored(0)?)?,
                bids: RowsBuilder::new(self.inputs.stored(1)?)?,
                times: TimestampMillisecondBuilder::new(),
                len: 0,
            });
        }
        let Some(f) = self.fired.as_mut() else { unreachable!("made above") };
        f.keys.append_value(ctx.keyed()?.current_key_and_namespace().0);
        f.auctions.push(pair(&self.auction_row)?.2)?;
        f.bids.push(pair(&self.winner_row)?.2)?;
        f.times.append_value(timestamp);
        f.len += 1;
        if f.len >= EMIT_AT {
            self.flush(out)?;
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let Some(f) = self.fired.as_mut().filter(|f| f.len > 0) else { return Ok(()) };
        let plan = self.inputs.built(winner_plan)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(f.keys.finish())];
        columns.extend(f.auctions.finish_without_event_time());
        columns.extend(f.bids.finish_without_event_time());
        columns.push(Arc::new(f.times.finish()));
        f.len = 0;
        let batch = RecordBatch::try_new(plan.joined.clone(), columns)
            .map_err(|e| OperatorError::Records(format!("winning-bids: building the output: {e}")))?;
        out.emit_batch(batch)
    }
}

/// The `winning-bids` kind: each auction's highest bid made while it was open, at its close.
pub struct WinningBidsKind;

impl Kind for WinningBidsKind {
    type Config = WinningBidsConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "winning-bids",
            Role::TwoInput,
            true,
            "Each auction's highest bid made while it was open, at its close",
            WinningBidsConfig::FIELDS,
        )
        .with_states(&[
            ("winning-bids-auction", StateClass::Value, "the open auction"),
            ("winning-bids-best", StateClass::Value, "its highest bid so far"),
            ("winning-bids-early", StateClass::List, "bids that came before their auction"),
            ("winning-bids-columns", StateClass::Union, "each input's columns"),
        ])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per auction, the auction, its best bid and the bids that came before it; the inputs' columns; timers.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .value::<Vec<u8>>("winning-bids-auction")
                .value::<Vec<u8>>("winning-bids-best")
                .list::<Vec<u8>>("winning-bids-early")
                .union::<String>("winning-bids-columns")
                .timers::<Vec<u8>>(),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<WinningBidsConfig, ConfigFieldError> {
        WinningBidsConfig::from_map(config)
    }

    fn output(
        &self,
        config: &WinningBidsConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        let (first, second) = super::join::two(inputs);
        Some(config.output(first, second))
    }

    fn build(&self, config: WinningBidsConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(WinningBids::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_higher_bid_wins_and_of_equal_ones_the_earlier() {
        assert!(beats(5, 10, None));
        assert!(beats(6, 10, Some((5, 1))));
        assert!(!beats(4, 1, Some((5, 10))));
        assert!(beats(5, 9, Some((5, 10))), "equal price, earlier bid");
        assert!(!beats(5, 10, Some((5, 10))), "equal price and time: the first to arrive stays");
        let mut row = Vec::new();
        write_pair(-3, 7, &mut row);
        row.extend_from_slice(b"xy");
        assert_eq!(pair(&row).unwrap(), (-3, 7, &b"xy"[..]));
        assert!(pair(&row[..15]).is_err());
    }
}

/// The operator in the harness: which bid wins each auction and when, and how open auctions and early bids
/// restore at another parallelism.
#[cfg(test)]
mod harness_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;
    use crate::builtins::text::lines_of;
    use crate::testing::{keyed_batch, partition, Harness, OperatorHarness};
    use arrow_array::{Int64Array, TimestampMillisecondArray};
    use weir_common::job::spec::StateBackend;

    fn ints(values: impl Iterator<Item = i64>) -> ArrayRef {
        Arc::new(Int64Array::from(values.collect::<Vec<_>>()))
    }

    fn keys(rows: &[(u64, i64, i64, i64)]) -> Vec<[u8; 8]> {
        rows.iter().map(|r| r.0.to_be_bytes()).collect()
    }

    /// Auctions `(key, seller, opens, expires)`.
    fn auctions(rows: &[(u64, i64, i64, i64)]) -> RecordBatch {
        let expires: ArrayRef = Arc::new(TimestampMillisecondArray::from(rows.iter().map(|r| r.3).collect::<Vec<_>>()));
        let opens: Vec<i64> = rows.iter().map(|r| r.2).collect();
        keyed_batch(&keys(rows), vec![("seller", ints(rows.iter().map(|r| r.1))), ("expires", expires)], &opens)
            .unwrap()
    }

    /// Bids `(key, price, bidder, time)`.
    fn bids(rows: &[(u64, i64, i64, i64)]) -> RecordBatch {
        let columns = vec![("price", ints(rows.iter().map(|r| r.1))), ("bidder", ints(rows.iter().map(|r| r.2)))];
        keyed_batch(&keys(rows), columns, &rows.iter().map(|r| r.3).collect::<Vec<_>>()).unwrap()
    }

    fn open(h: Harness) -> OperatorHarness<WinningBids> {
        let cfg = WinningBidsConfig::from_map(&m(&[("closes", "expires"), ("by", "price")])).unwrap();
        h.open(WinningBids::new(cfg)).unwrap()
    }

    #[test]
    fn each_auction_goes_out_at_its_close_with_its_highest_bid_made_while_it_was_open() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut h = open(Harness::keyed(backend));
            // A bid before its auction waits for it.
            h.process_second(&bids(&[(3, 4, 31, 1)])).unwrap();
            h.process(&auctions(&[(1, 100, 0, 10), (2, 200, 0, 20), (3, 300, 0, 8)])).unwrap();
            // Of equal bids the earlier wins; a bid after the close does not count.
            h.process_second(&bids(&[(1, 5, 11, 3), (1, 7, 12, 4), (1, 7, 13, 2), (1, 9, 14, 11), (2, 1, 21, 5)]))
                .unwrap();
            h.watermark(10).unwrap();
            let closed = lines_of(&h.take_output());
            // A bid whose auction has not come when the watermark passes it never counts.
            h.process_second(&bids(&[(4, 50, 41, 12)])).unwrap();
            h.watermark(15).unwrap();
            h.process(&auctions(&[(4, 400, 13, 30)])).unwrap();
            h.end_input().unwrap();
            // key, seller, expires, price, bidder @ expires: auction 1's earlier 7, auction 3's early 4.
            assert_eq!(closed, ["1,100,10,7,13@10", "3,300,8,4,31@8"], "{backend:?}");
            assert_eq!(lines_of(&h.take_output()), ["2,200,20,1,21@20"], "{backend:?}: auction 4 had no bid");
        }
    }

    /// Open auctions, their best bids and early bids taken by one subtask, restored as two: each closes its own
    /// keys' auctions, both emit what one would.
    #[test]
    fn open_auctions_restored_at_another_parallelism_close_in_the_subtask_of_their_key() {
        let n = 24u64;
        let open_auctions: Vec<(u64, i64, i64, i64)> = (0..n).map(|k| (k, k as i64, 0, 20)).collect();
        let early: Vec<(u64, i64, i64, i64)> = (n..2 * n).map(|k| (k, 5, 1, 3)).collect();
        let first_bids: Vec<(u64, i64, i64, i64)> = (0..n).map(|k| (k, 10, 2, 4)).collect();
        let later_bids: Vec<(u64, i64, i64, i64)> = (0..2 * n).map(|k| (k, 5 + (k % 3) as i64 * 5, 3, 6)).collect();
        let late_auctions: Vec<(u64, i64, i64, i64)> = (n..2 * n).map(|k| (k, k as i64, 2, 25)).collect();
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut one = open(Harness::keyed(backend));
            one.process(&auctions(&open_auctions)).unwrap();
            one.process_second(&bids(&early)).unwrap();
            one.process_second(&bids(&first_bids)).unwrap();
            let snapshot = one.snapshot(1).unwrap();
            let (later, late) = (bids(&later_bids), auctions(&late_auctions));
            one.process(&late).unwrap();
            one.process_second(&later).unwrap();
            one.end_input().unwrap();
            let expected = lines_of(&one.take_output());
            assert_eq!(expected.len(), 2 * n as usize);
            let mut union = Vec::new();
            let parts = partition(&late, 2, 128).unwrap().into_iter().zip(partition(&later, 2, 128).unwrap());
            for (i, (late, later)) in parts.enumerate() {
                let mut h = open(Harness::keyed(backend).subtask(i as u32, 2).restore(&snapshot));
                h.process(&late).unwrap();
                h.process_second(&later).unwrap();
                h.end_input().unwrap();
                union.extend(lines_of(&h.take_output()));
            }
            union.sort();
            assert_eq!(union, expected, "{backend:?}");
        }
    }
}
