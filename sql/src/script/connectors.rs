//! A table's `WITH` options to the Weir kind it reads from or writes to (Flink's option names), and, for a source
//! whose SQL shape differs from the kind's columns, how its columns map onto the kind's: the `nexmark` table is
//! Nexmark's own shape (one nullable `ROW` per event type, `../shared/flink-peer/nexmark/sql/source.sql`) over
//! the `nexmark` kind's flat columns (`bid.price` is `bid_price`).

use super::error::SqlError;
use arrow_schema::{DataType, Schema, TimeUnit};
use std::collections::BTreeMap;

/// A config value of the spec (YAML).
pub type ConfigValue = serde_yaml::Value;

/// What a table is connected to.
#[derive(Clone, Debug, PartialEq)]
pub enum Connector {
    /// The Nexmark stream (the `nexmark` kind).
    Nexmark {
        /// The kind's config.
        config: BTreeMap<String, ConfigValue>,
    },
    /// Rows are dropped (the `blackhole` kind).
    Blackhole,
    /// Weir's exactly-once file sink (the `file-sink` kind).
    Filesystem {
        /// The kind's config.
        config: BTreeMap<String, ConfigValue>,
    },
}

/// The fields of each event type's `ROW` in Nexmark's table, with the `nexmark` kind's column each reads (`None`:
/// the event's time, `date_time`, which the row holds only in events of its type) and its type.
pub const NEXMARK_SHAPE: [(&str, i32, &[NexmarkField]); 3] = [
    (
        "person",
        0,
        &[
            ("id", Some("person_id"), NexmarkType::Int64),
            ("name", Some("person_name"), NexmarkType::Utf8),
            ("emailAddress", Some("person_email_address"), NexmarkType::Utf8),
            ("creditCard", Some("person_credit_card"), NexmarkType::Utf8),
            ("city", Some("person_city"), NexmarkType::Utf8),
            ("state", Some("person_state"), NexmarkType::Utf8),
            ("dateTime", None, NexmarkType::Timestamp),
            ("extra", Some("person_extra"), NexmarkType::Utf8),
        ],
    ),
    (
        "auction",
        1,
        &[
            ("id", Some("auction_id"), NexmarkType::Int64),
            ("itemName", Some("auction_item_name"), NexmarkType::Utf8),
            ("description", Some("auction_description"), NexmarkType::Utf8),
            ("initialBid", Some("auction_initial_bid"), NexmarkType::Int64),
            ("reserve", Some("auction_reserve"), NexmarkType::Int64),
            ("dateTime", None, NexmarkType::Timestamp),
            ("expires", Some("auction_expires"), NexmarkType::Timestamp),
            ("seller", Some("auction_seller"), NexmarkType::Int64),
            ("category", Some("auction_category"), NexmarkType::Int64),
            ("extra", Some("auction_extra"), NexmarkType::Utf8),
        ],
    ),
    (
        "bid",
        2,
        &[
            ("auction", Some("bid_auction"), NexmarkType::Int64),
            ("bidder", Some("bid_bidder"), NexmarkType::Int64),
            ("price", Some("bid_price"), NexmarkType::Int64),
            ("channel", Some("bid_channel"), NexmarkType::Utf8),
            ("url", Some("bid_url"), NexmarkType::Utf8),
            ("dateTime", None, NexmarkType::Timestamp),
            ("extra", Some("bid_extra"), NexmarkType::Utf8),
        ],
    ),
];

/// A field of a Nexmark `ROW`: its name, the kind's column it reads (`None`: the event's time) and its type.
pub type NexmarkField = (&'static str, Option<&'static str>, NexmarkType);

/// The types of Nexmark's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NexmarkType {
    /// `BIGINT`.
    Int64,
    /// `VARCHAR`.
    Utf8,
    /// `TIMESTAMP(3)`.
    Timestamp,
}

impl NexmarkType {
    fn fits(self, t: &DataType) -> bool {
        match self {
            NexmarkType::Int64 => *t == DataType::Int64,
            NexmarkType::Utf8 => matches!(t, DataType::Utf8 | DataType::LargeUtf8),
            NexmarkType::Timestamp => matches!(t, DataType::Timestamp(TimeUnit::Millisecond, None)),
        }
    }

    fn sql(self) -> &'static str {
        match self {
            NexmarkType::Int64 => "BIGINT",
            NexmarkType::Utf8 => "VARCHAR",
            NexmarkType::Timestamp => "TIMESTAMP(3)",
        }
    }
}

/// How a column (or field of a `ROW` column) of a source table reads from the kind's columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapped {
    /// The kind's column of this name.
    Column(String),
    /// The event's time, where the row's event type is this one (null in events of other types).
    TimeOf(i32),
}

fn options_map(table: &str, options: &[(String, String)]) -> Result<BTreeMap<String, String>, SqlError> {
    let mut out = BTreeMap::new();
    for (k, v) in options {
        if out.insert(k.clone(), v.clone()).is_some() {
            return Err(SqlError::plain(format!("table {table}: option '{k}' is given twice")));
        }
    }
    Ok(out)
}

fn number(table: &str, key: &str, v: &str) -> Result<ConfigValue, SqlError> {
    v.trim()
        .parse::<u64>()
        .map(ConfigValue::from)
        .map_err(|_| SqlError::plain(format!("table {table}: option '{key}' = '{v}' is not a whole number")))
}

fn unknown(table: &str, connector: &str, key: &str, known: &[&str]) -> SqlError {
    SqlError::plain(format!(
        "table {table}: the {connector} connector has no option '{key}' (it reads {})",
        known.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
    ))
}

impl Connector {
    /// The connector the options of table `table` name, its options checked.
    pub fn from_options(table: &str, options: &[(String, String)]) -> Result<Connector, SqlError> {
        let mut map = options_map(table, options)?;
        let Some(name) = map.remove("connector") else {
            return Err(SqlError::plain(format!("table {table} names no 'connector'")));
        };
        match name.as_str() {
            "nexmark" => {
                const KNOWN: &[&str] = &["events", "tps", "block", "rate_per_sec", "splits"];
                let mut config = BTreeMap::new();
                for (k, v) in &map {
                    if !KNOWN.contains(&k.as_str()) {
                        return Err(unknown(table, "nexmark", k, KNOWN));
                    }
                    config.insert(k.clone(), number(table, k, v)?);
                }
                Ok(Connector::Nexmark { config })
            }
            "blackhole" => match map.keys().next() {
                Some(k) => Err(unknown(table, "blackhole", k, &[])),
                None => Ok(Connector::Blackhole),
            },
            "filesystem" => {
                const KNOWN: &[&str] = &["path", "format"];
                let mut config = BTreeMap::new();
                for k in map.keys() {
                    if !KNOWN.contains(&k.as_str()) {
                        return Err(unknown(table, "filesystem", k, KNOWN));
                    }
                }
                let path = map
                    .get("path")
                    .ok_or_else(|| SqlError::plain(format!("table {table}: the filesystem connector needs 'path'")))?;
                config.insert("path".into(), ConfigValue::from(path.clone()));
                let format = map.get("format").map(String::as_str).unwrap_or("text");
                if !["text", "csv", "json", "parquet"].contains(&format) {
                    return Err(SqlError::plain(format!(
                        "table {table}: 'format' = '{format}': the filesystem connector writes text, csv, json or parquet"
                    )));
                }
                config.insert("format".into(), ConfigValue::from(format));
                Ok(Connector::Filesystem { config })
            }
            "kafka" | "datagen" | "print" | "upsert-kafka" | "jdbc" => Err(SqlError::plain(format!(
                "table {table}: the '{name}' connector is not supported yet (Weir's SQL connectors: nexmark, \
                 filesystem, blackhole)"
            ))),
            other => Err(SqlError::plain(format!(
                "table {table}: no connector '{other}' (Weir's SQL connectors: nexmark, filesystem, blackhole)"
            ))),
        }
    }

    /// The kind a table of this connector reads from, if it is a source, with its config (`parallelism`: the
    /// job's, which a Nexmark stream's split count follows unless `splits` is given, as in Flink's connector).
    pub fn source(&self, parallelism: Option<u32>) -> Option<(&'static str, BTreeMap<String, ConfigValue>)> {
        match self {
            Connector::Nexmark { config } => {
                let mut config = config.clone();
                if let (false, Some(p)) = (config.contains_key("splits"), parallelism) {
                    config.insert("splits".into(), ConfigValue::from(p));
                }
                Some(("nexmark", config))
            }
            _ => None,
        }
    }

    /// The column of the source kind holding the time it stamps each row with (its event time), if it reads.
    pub fn event_time_column(&self) -> Option<&'static str> {
        match self {
            Connector::Nexmark { .. } => Some("date_time"),
            _ => None,
        }
    }

    /// The kind a table of this connector writes to, if it is a sink, with its config.
    pub fn sink(&self) -> Option<(&'static str, BTreeMap<String, ConfigValue>)> {
        match self {
            Connector::Blackhole => Some(("blackhole", BTreeMap::new())),
            Connector::Filesystem { config } => Some(("file-sink", config.clone())),
            Connector::Nexmark { .. } => None,
        }
    }

    /// Checks a source table's declared columns against what the connector gives.
    pub fn check_source_columns(&self, table: &str, schema: &Schema) -> Result<(), SqlError> {
        let Connector::Nexmark { .. } = self else { return Ok(()) };
        for f in schema.fields() {
            if f.name() == "event_type" {
                if *f.data_type() != DataType::Int32 {
                    return Err(SqlError::plain(format!("table {table}: event_type is an INT in the Nexmark stream")));
                }
                continue;
            }
            let Some((_, _, fields)) = NEXMARK_SHAPE.iter().find(|(row, _, _)| *row == f.name()) else {
                return Err(SqlError::plain(format!(
                    "table {table}: the Nexmark stream has no column {:?} (it has event_type, person, auction and \
                     bid; computed columns are declared with AS)",
                    f.name()
                )));
            };
            let DataType::Struct(declared) = f.data_type() else {
                return Err(SqlError::plain(format!("table {table}: {} is a ROW<…> in the Nexmark stream", f.name())));
            };
            for d in declared {
                match fields.iter().find(|(n, _, _)| *n == d.name()) {
                    None => {
                        return Err(SqlError::plain(format!(
                            "table {table}: {}.{} is not a field of the Nexmark stream",
                            f.name(),
                            d.name()
                        )))
                    }
                    Some((_, _, t)) if !t.fits(d.data_type()) => {
                        return Err(SqlError::plain(format!(
                            "table {table}: {}.{} is a {} in the Nexmark stream, not {}",
                            f.name(),
                            d.name(),
                            t.sql(),
                            d.data_type()
                        )))
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The kind's column a top-level column of the table reads (`None`: it has no column of its own).
    pub fn map_column(&self, name: &str) -> Option<Mapped> {
        match self {
            Connector::Nexmark { .. } => (name == "event_type").then(|| Mapped::Column(name.into())),
            _ => Some(Mapped::Column(name.into())),
        }
    }

    /// The kind's column field `field` of `ROW` column `row` reads.
    pub fn map_field(&self, row: &str, field: &str) -> Option<Mapped> {
        let Connector::Nexmark { .. } = self else { return None };
        let (_, event_type, fields) = NEXMARK_SHAPE.iter().find(|(r, _, _)| *r == row)?;
        let (_, column, _) = fields.iter().find(|(f, _, _)| *f == field)?;
        Some(match column {
            Some(c) => Mapped::Column((*c).into()),
            None => Mapped::TimeOf(*event_type),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_are_checked_by_name() {
        let c = Connector::from_options("t", &opts(&[("connector", "nexmark"), ("events", "100")])).unwrap();
        assert_eq!(c.source(Some(2)).unwrap().1.get("splits"), Some(&ConfigValue::from(2u32)));
        let e = Connector::from_options("t", &opts(&[("connector", "nexmark"), ("evnts", "1")])).unwrap_err();
        assert!(e.to_string().contains("'evnts'") && e.to_string().contains("'events'"), "{e}");
        let e = Connector::from_options("t", &opts(&[("connector", "nexmark"), ("events", "many")])).unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        let e = Connector::from_options("t", &opts(&[("connector", "filesystem")])).unwrap_err();
        assert!(e.to_string().contains("'path'"), "{e}");
        let e = Connector::from_options("t", &opts(&[("connector", "filesystem"), ("path", "/x"), ("format", "orc")]));
        assert!(e.unwrap_err().to_string().contains("orc"));
        assert!(Connector::from_options("t", &opts(&[("x", "y")])).unwrap_err().to_string().contains("'connector'"));
        let e = Connector::from_options("t", &opts(&[("connector", "jdbc")])).unwrap_err().to_string();
        assert!(e.contains("not supported yet"), "{e}");
    }

    #[test]
    fn nexmark_rows_map_onto_the_kinds_columns() {
        let c = Connector::Nexmark { config: BTreeMap::new() };
        assert_eq!(c.map_field("bid", "price"), Some(Mapped::Column("bid_price".into())));
        assert_eq!(c.map_field("auction", "dateTime"), Some(Mapped::TimeOf(1)));
        assert_eq!(c.map_field("bid", "nope"), None);
        assert_eq!(c.map_column("bid"), None);
        assert_eq!(c.map_column("event_type"), Some(Mapped::Column("event_type".into())));
    }
}
