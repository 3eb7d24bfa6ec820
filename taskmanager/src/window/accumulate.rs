//! The accumulators of `window-aggregate`'s aggregates, as the fixed-size bytes its state stores: a count, min
//! or max is 8 bytes (little-endian), a sum or an average the sum and the count (16). Slices combine into
//! windows and sessions merge with [`Acc::merge`]. Counts, sums and averages can also be taken out again
//! ([`Running`]): a sliding window is then the one before it plus its newest slices minus those that left.

use crate::window::config::WindowAggregate;

/// One window's (or slice's) accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acc {
    /// Records seen.
    Count(u64),
    /// Their sum (wrapping, as a SQL `BIGINT` sum) and count.
    Sum(i64, u64),
    /// Their minimum.
    Min(i64),
    /// Their maximum.
    Max(i64),
    /// Their sum and count.
    Avg(i64, u64),
}

/// A window's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AccResult {
    /// Count, sum, min, max.
    Int(i64),
    /// Average.
    Float(f64),
}

impl Acc {
    /// The accumulator of one record of `value`.
    pub fn of(agg: WindowAggregate, value: i64) -> Acc {
        match agg {
            WindowAggregate::Count => Acc::Count(1),
            WindowAggregate::Sum => Acc::Sum(value, 1),
            WindowAggregate::Min => Acc::Min(value),
            WindowAggregate::Max => Acc::Max(value),
            WindowAggregate::Avg => Acc::Avg(value, 1),
        }
    }

    /// Folds `other` (of the same aggregate) in.
    pub fn merge(&mut self, other: &Acc) {
        *self = match (*self, *other) {
            (Acc::Count(a), Acc::Count(b)) => Acc::Count(a + b),
            (Acc::Sum(a, n), Acc::Sum(b, m)) => Acc::Sum(a.wrapping_add(b), n + m),
            (Acc::Min(a), Acc::Min(b)) => Acc::Min(a.min(b)),
            (Acc::Max(a), Acc::Max(b)) => Acc::Max(a.max(b)),
            (Acc::Avg(s, n), Acc::Avg(t, m)) => Acc::Avg(s.wrapping_add(t), n + m),
            (a, _) => a,
        }
    }

    /// The stored bytes.
    pub fn encode(&self, out: &mut [u8; 16]) -> usize {
        match *self {
            Acc::Count(n) => out[..8].copy_from_slice(&n.to_le_bytes()),
            Acc::Min(v) | Acc::Max(v) => out[..8].copy_from_slice(&v.to_le_bytes()),
            Acc::Sum(s, n) | Acc::Avg(s, n) => {
                out[..8].copy_from_slice(&s.to_le_bytes());
                out[8..].copy_from_slice(&n.to_le_bytes());
                return 16;
            }
        }
        8
    }

    /// The accumulator of `agg` stored as `bytes`, or `None` if they are not one.
    pub fn decode(agg: WindowAggregate, bytes: &[u8]) -> Option<Acc> {
        let word = |i: usize| bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        Some(match (agg, bytes.len()) {
            (WindowAggregate::Count, 8) => Acc::Count(word(0)?),
            (WindowAggregate::Sum, 16) => Acc::Sum(word(0)? as i64, word(1)?),
            (WindowAggregate::Min, 8) => Acc::Min(word(0)? as i64),
            (WindowAggregate::Max, 8) => Acc::Max(word(0)? as i64),
            (WindowAggregate::Avg, 16) => Acc::Avg(word(0)? as i64, word(1)?),
            _ => return None,
        })
    }

    /// The window's value.
    pub fn result(&self) -> AccResult {
        match *self {
            Acc::Count(n) => AccResult::Int(n as i64),
            Acc::Sum(v, _) | Acc::Min(v) | Acc::Max(v) => AccResult::Int(v),
            Acc::Avg(s, n) => AccResult::Float(s as f64 / n.max(1) as f64),
        }
    }
}

/// A sum and count that slices are added to and taken from (count, sum, avg): the part of a sliding window that
/// the next window shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Running {
    /// Sum of the values (of the counts, for a count).
    pub sum: i64,
    /// Records.
    pub n: u64,
}

impl Running {
    /// Whether `agg`'s accumulators can be taken out again.
    pub fn applies(agg: WindowAggregate) -> bool {
        matches!(agg, WindowAggregate::Count | WindowAggregate::Sum | WindowAggregate::Avg)
    }

    /// The sum and count of `acc` (`None` for min and max).
    fn of(acc: &Acc) -> Option<(i64, u64)> {
        match *acc {
            Acc::Count(n) => Some((n as i64, n)),
            Acc::Sum(s, n) | Acc::Avg(s, n) => Some((s, n)),
            Acc::Min(_) | Acc::Max(_) => None,
        }
    }

    /// Adds a slice.
    pub fn add(&mut self, acc: &Acc) {
        if let Some((s, n)) = Self::of(acc) {
            self.sum = self.sum.wrapping_add(s);
            self.n += n;
        }
    }

    /// Takes a slice out.
    pub fn remove(&mut self, acc: &Acc) {
        if let Some((s, n)) = Self::of(acc) {
            self.sum = self.sum.wrapping_sub(s);
            self.n = self.n.saturating_sub(n);
        }
    }

    /// The window's value for `agg`.
    pub fn result(&self, agg: WindowAggregate) -> AccResult {
        match agg {
            WindowAggregate::Avg => AccResult::Float(self.sum as f64 / self.n.max(1) as f64),
            WindowAggregate::Count => AccResult::Int(self.n as i64),
            _ => AccResult::Int(self.sum),
        }
    }

    /// The stored bytes: the window end it belongs to, the sum and the count.
    pub fn encode(&self, end: i64) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&end.to_le_bytes());
        out[8..16].copy_from_slice(&self.sum.to_le_bytes());
        out[16..].copy_from_slice(&self.n.to_le_bytes());
        out
    }

    /// The window end and running value stored as `bytes`.
    pub fn decode(bytes: &[u8]) -> Option<(i64, Running)> {
        let word = |i: usize| bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        (bytes.len() == 24).then_some(())?;
        Some((word(0)? as i64, Running { sum: word(1)? as i64, n: word(2)? }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulators_fold_round_trip_and_refuse_foreign_bytes() {
        let values = [5i64, -3, 12, 0];
        for (agg, want) in [
            (WindowAggregate::Count, AccResult::Int(4)),
            (WindowAggregate::Sum, AccResult::Int(14)),
            (WindowAggregate::Min, AccResult::Int(-3)),
            (WindowAggregate::Max, AccResult::Int(12)),
            (WindowAggregate::Avg, AccResult::Float(3.5)),
        ] {
            let mut acc = Acc::of(agg, values[0]);
            for v in &values[1..] {
                let mut buf = [0u8; 16];
                let n = acc.encode(&mut buf);
                acc = Acc::decode(agg, &buf[..n]).unwrap();
                acc.merge(&Acc::of(agg, *v));
            }
            assert_eq!(acc.result(), want, "{agg:?}");
        }
        assert_eq!(Acc::decode(WindowAggregate::Avg, &[0; 8]), None);
        let mut r = Running::default();
        for v in [3, 4, 5] {
            r.add(&Acc::of(WindowAggregate::Sum, v));
        }
        r.remove(&Acc::of(WindowAggregate::Sum, 3));
        assert_eq!(
            (r.result(WindowAggregate::Sum), r.result(WindowAggregate::Count)),
            (AccResult::Int(9), AccResult::Int(2))
        );
        assert_eq!(Running::decode(&r.encode(-7)), Some((-7, r)));
        assert!(!Running::applies(WindowAggregate::Max));
        assert_eq!(Acc::decode(WindowAggregate::Count, &[0; 3]), None);
    }
}
