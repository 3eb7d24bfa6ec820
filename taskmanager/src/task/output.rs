//! Output edges and chaining: records passed down a chain of operators as values, then partitioned onto the
//! task's output channels and batched into frames.

use super::error::{in_operator, TaskError};
use crate::api::operator::{Collector, Operator, OperatorError, ProcessContext, RuntimeInfo, Source};
use crate::api::record::{encode_record, Record, MAX_BATCH_RECORDS};
use crate::net::{begin_batch, encode_frame, finish_batch, Frame, OutputChannel};
use crate::time::MIN_WATERMARK;
use weir_common::keygroup::{key_group_for_key, subtask_for_key_group};
use weir_common::spec::Partitioning;
use weir_state::{KeyedStateBackend, OperatorStateStore};

/// Records per network batch.
pub(super) const BATCH_RECORDS: u32 = 1024;
// Consumers refuse batches of more records than this.
const _: () = assert!(BATCH_RECORDS <= MAX_BATCH_RECORDS);
/// Bytes per network batch.
pub(super) const BATCH_BYTES: usize = 64 << 10;
pub(super) enum Head {
    Source(Box<dyn Source>),
    Operator(Box<dyn Operator>),
}

pub(super) struct ChainOp {
    pub(super) info: RuntimeInfo,
    pub(super) head: Head,
    pub(super) keyed: Option<Box<dyn KeyedStateBackend>>,
    pub(super) op_state: OperatorStateStore,
    /// The operator's event-time watermark.
    pub(super) watermark: i64,
    /// Records that reached the operator at or behind its watermark.
    pub(super) late_records: metrics::Counter,
}

/// Runs `records` through the operators of `chain` (each one's output feeding the next, chunk by chunk)
/// and routes what the last one emits to `outputs`.
pub(super) fn push_chain(
    chain: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    records: Vec<Record>,
) -> Result<(), TaskError> {
    let Some((op, rest)) = chain.split_first_mut() else {
        return route(outputs, &records);
    };
    let Head::Operator(o) = &mut op.head else {
        return Err(TaskError::Other(format!("source {:?} cannot take input", op.info.uid)));
    };
    if op.watermark > MIN_WATERMARK {
        let w = op.watermark;
        let late = records.iter().filter(|r| r.timestamp.is_some_and(|t| t <= w)).count();
        if late > 0 {
            op.late_records.increment(late as u64);
        }
    }
    let mut ctx = ProcessContext::new(&op.info, keyed_mut(&mut op.keyed)).at_watermark(op.watermark);
    let mut downstream = |chunk: Vec<Record>| downstream_of(rest, outputs, chunk);
    let mut out = Collector::new(&mut downstream);
    o.process_batch(&records, &mut ctx, &mut out).map_err(|e| in_operator(&op.info.uid, e))?;
    out.flush()?;
    Ok(())
}

/// Advances the watermark of `chain` to `watermark`: each operator in turn takes it and hands on what it emits
/// (before the watermark reaches the next one), then the watermark goes out on every output edge. With
/// `hooks` false (a task restored after its end of input) the operators only take note of it.
pub(super) fn advance_watermark(
    chain: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    watermark: i64,
    hooks: bool,
) -> Result<(), TaskError> {
    for i in 0..chain.len() {
        let (left, rest) = chain.split_at_mut(i + 1);
        let op = &mut left[i];
        if watermark <= op.watermark {
            continue;
        }
        op.watermark = watermark;
        if let (Head::Operator(o), true) = (&mut op.head, hooks) {
            let mut ctx = ProcessContext::new(&op.info, keyed_mut(&mut op.keyed)).at_watermark(watermark);
            let mut downstream = |chunk: Vec<Record>| downstream_of(rest, outputs, chunk);
            let mut out = Collector::new(&mut downstream);
            o.on_watermark(watermark, &mut ctx, &mut out).map_err(|e| in_operator(&op.info.uid, e))?;
            out.flush()?;
        }
    }
    for edge in outputs {
        edge.broadcast(&Frame::Watermark(watermark))?;
    }
    Ok(())
}

/// The part of a chain after an operator, as that operator's collector sees it.
pub(super) fn downstream_of(
    rest: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    chunk: Vec<Record>,
) -> Result<(), OperatorError> {
    push_chain(rest, outputs, chunk).map_err(|e| match e {
        TaskError::Operator(e) => e,
        other => OperatorError::Other(other.to_string()),
    })
}

pub(super) fn route(outputs: &mut [OutputEdge], records: &[Record]) -> Result<(), TaskError> {
    for edge in outputs {
        edge.records_out.increment(records.len() as u64);
        for r in records {
            edge.emit(r)?;
        }
    }
    Ok(())
}

/// One output edge: a partitioner and a channel per target subtask.
pub(super) struct OutputEdge {
    pub(super) partitioning: Partitioning,
    pub(super) channels: Vec<OutputChannel>,
    pub(super) bufs: Vec<Vec<u8>>,
    pub(super) counts: Vec<u32>,
    pub(super) next: usize,
    pub(super) to_parallelism: u32,
    pub(super) max_parallelism: u32,
    pub(super) records_out: metrics::Counter,
}

impl OutputEdge {
    pub(super) fn emit(&mut self, r: &Record) -> Result<(), TaskError> {
        match self.partitioning {
            // A descriptor never holds unspecified (decoding refuses it).
            Partitioning::Forward | Partitioning::Unspecified => self.push(0, r),
            Partitioning::Rebalance => {
                let t = self.next;
                self.next = (self.next + 1) % self.channels.len();
                self.push(t, r)
            }
            Partitioning::KeyBy => {
                let kg = key_group_for_key(&r.key, self.max_parallelism);
                let t = subtask_for_key_group(kg, self.to_parallelism, self.max_parallelism).0 as usize;
                self.push(t, r)
            }
            Partitioning::Broadcast => {
                for t in 0..self.channels.len() {
                    self.push(t, r)?;
                }
                Ok(())
            }
        }
    }

    pub(super) fn push(&mut self, t: usize, r: &Record) -> Result<(), TaskError> {
        encode_record(r, &mut self.bufs[t])?;
        self.counts[t] += 1;
        if self.counts[t] >= BATCH_RECORDS || self.bufs[t].len() >= BATCH_BYTES {
            self.flush(t)?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self, t: usize) -> Result<(), TaskError> {
        if self.counts[t] == 0 {
            return Ok(());
        }
        let mut buf = std::mem::replace(&mut self.bufs[t], Vec::with_capacity(BATCH_BYTES + 4096));
        finish_batch(&mut buf, self.counts[t]);
        self.counts[t] = 0;
        begin_batch(&mut self.bufs[t]);
        self.channels[t].send_blocking(buf)?;
        Ok(())
    }

    pub(super) fn flush_all(&mut self) -> Result<(), TaskError> {
        for t in 0..self.channels.len() {
            self.flush(t)?;
        }
        Ok(())
    }

    pub(super) fn broadcast(&mut self, frame: &Frame) -> Result<(), TaskError> {
        self.flush_all()?;
        let bytes = encode_frame(frame);
        for c in &mut self.channels {
            c.send_blocking(bytes.clone())?;
        }
        Ok(())
    }
}

/// Shortens the trait object's lifetime, which `Option::as_deref_mut` cannot do behind `&mut`.
pub(super) fn keyed_mut(k: &mut Option<Box<dyn KeyedStateBackend>>) -> Option<&mut dyn KeyedStateBackend> {
    match k {
        Some(b) => Some(b.as_mut()),
        None => None,
    }
}
