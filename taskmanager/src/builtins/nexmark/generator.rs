//! The Nexmark event stream (`../shared/flink-peer/nexmark/GENERATOR.md`, the contract shared with Flink's side
//! of the race): every event is a pure function of its number `n` — a `java.util.Random`-compatible generator
//! seeded with `mix64(n)` draws its fields in a fixed order — so any split of the event numbers, any restart
//! and any parallelism produce the same events, byte for byte, as the Java reference.
//!
//! [`Generator::event`] fills a reused [`Event`] (its strings keep their capacity), so generating allocates
//! nothing per event once the buffers have grown.

use std::fmt::Write as _;
use std::sync::OnceLock;

/// Epoch milliseconds of event 0 (2015-07-15T00:00:00Z).
pub const BASE_TIME_MS: i64 = 1_436_918_400_000;
/// Default events per second of event time (Nexmark runner V2).
pub const DEFAULT_TPS: u64 = 100_000;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: i32 = 5;
const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
const HOT_BATCH: i64 = 100;
const NUM_IN_FLIGHT_AUCTIONS: i64 = 100;
const NUM_ACTIVE_PEOPLE: i64 = 1000;
const AVG_PERSON_BYTES: usize = 200;
const AVG_AUCTION_BYTES: usize = 500;
const AVG_BID_BYTES: usize = 100;
const PRICE_STEPS: usize = 6000;
const HOT_CHANNEL_RATIO: i32 = 2;
const NUM_CHANNELS: i32 = 10_000;
const CHANNEL_SEED_BASE: u64 = 1 << 40;

const FIRST_NAMES: [&str; 11] =
    ["Ada", "Bruno", "Carla", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal"];
const LAST_NAMES: [&str; 9] = ["Lindqvist", "Moreau", "Novak", "Okafor", "Pereira", "Quinn", "Rossi", "Sato", "Tanaka"];
const CITIES: [&str; 10] =
    ["Albany", "Boulder", "Chico", "Dayton", "Eugene", "Fresno", "Greeley", "Helena", "Irvine", "Juneau"];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

/// The shape of the stream: the event mix and how often an entity is a hot one (§2; the defaults are the spec's,
/// the stream Flink's side generates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Persons per period of `person + auction + bid` events.
    pub person_proportion: u64,
    /// Auctions per period.
    pub auction_proportion: u64,
    /// Bids per period.
    pub bid_proportion: u64,
    /// A bid is for the hot auction unless a draw in `0..ratio` is 0.
    pub hot_auction_ratio: u32,
    /// A bid is by a hot bidder unless a draw in `0..ratio` is 0.
    pub hot_bidder_ratio: u32,
    /// An auction is by a hot seller unless a draw in `0..ratio` is 0.
    pub hot_seller_ratio: u32,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
            hot_seller_ratio: 4,
        }
    }
}

impl Params {
    /// Events per period.
    pub fn total(&self) -> u64 {
        self.person_proportion + self.auction_proportion + self.bid_proportion
    }

    /// Why these parameters make no stream, if they do not: the generator needs a non-empty period, a person
    /// before any auction, an auction before any bid, and ratios of at least 1.
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let limit = 1 << 20;
        for (name, v) in [
            ("person_proportion", self.person_proportion),
            ("auction_proportion", self.auction_proportion),
            ("bid_proportion", self.bid_proportion),
        ] {
            if v > limit {
                return Err((name, "must be at most 1048576"));
            }
        }
        if self.total() == 0 {
            return Err(("person_proportion", "the proportions sum to zero: the stream would have no events"));
        }
        if self.person_proportion == 0 {
            return Err(("person_proportion", "must be at least 1: auctions and bids refer to persons"));
        }
        if self.auction_proportion == 0 && self.bid_proportion > 0 {
            return Err(("auction_proportion", "must be at least 1 when there are bids: bids refer to auctions"));
        }
        for (name, v) in [
            ("hot_auction_ratio", self.hot_auction_ratio),
            ("hot_bidder_ratio", self.hot_bidder_ratio),
            ("hot_seller_ratio", self.hot_seller_ratio),
        ] {
            if v == 0 || v > i32::MAX as u32 {
                return Err((name, "must be between 1 and 2147483647"));
            }
        }
        Ok(())
    }

    /// Events an auction stays open for, on average half of it (`NUM_IN_FLIGHT_AUCTIONS · total / auctions`).
    fn auction_horizon(&self) -> u64 {
        (NUM_IN_FLIGHT_AUCTIONS as u64 * self.total()) / self.auction_proportion.max(1)
    }
}

/// The splitmix64 finalizer (GENERATOR.md §3.1).
pub fn mix64(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `java.util.Random`, exactly (§3.2).
#[derive(Debug, Clone)]
pub struct JRandom {
    seed: i64,
}

const MULT: i64 = 0x5_DEEC_E66D;
const ADD: i64 = 0xB;
const MASK: i64 = (1 << 48) - 1;

impl JRandom {
    /// A generator seeded with `seed` (Java's `new Random(seed)`).
    pub fn new(seed: i64) -> Self {
        JRandom { seed: (seed ^ MULT) & MASK }
    }

    /// Java's `setSeed`.
    pub fn set_seed(&mut self, seed: i64) {
        self.seed = (seed ^ MULT) & MASK;
    }

    fn next(&mut self, bits: u32) -> i32 {
        self.seed = (self.seed.wrapping_mul(MULT).wrapping_add(ADD)) & MASK;
        ((self.seed as u64) >> (48 - bits)) as i32
    }

    /// Java's `nextInt()`.
    pub fn next_int(&mut self) -> i32 {
        self.next(32)
    }

    /// Java's `nextInt(bound)`, `bound > 0`.
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        let mut r = self.next(31);
        let m = bound.wrapping_sub(1);
        if bound & m == 0 {
            return ((i64::from(bound) * i64::from(r)) >> 31) as i32;
        }
        let mut u = r;
        loop {
            r = u % bound;
            if u.wrapping_sub(r).wrapping_add(m) < 0 {
                u = self.next(31);
                continue;
            }
            return r;
        }
    }

    /// Java's `nextLong()`.
    pub fn next_long(&mut self) -> i64 {
        (i64::from(self.next(32)) << 32).wrapping_add(i64::from(self.next(32)))
    }
}

/// The event timestamp of event `n` at `tps` events per second of event time (§4): one IEEE double product,
/// truncated toward zero, then integer division.
pub fn timestamp(n: u64, tps: u64) -> i64 {
    let delay_us = 1_000_000.0 / tps as f64;
    BASE_TIME_MS + ((n as f64 * delay_us) as i64) / 1000
}

/// The kind of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventKind {
    /// A new person (`event_type` 0).
    #[default]
    Person,
    /// A new auction (`event_type` 1).
    Auction,
    /// A bid (`event_type` 2).
    Bid,
}

impl EventKind {
    /// The kind of event `n`.
    pub fn of(n: u64, p: &Params) -> Self {
        match n % p.total().max(1) {
            r if r < p.person_proportion => EventKind::Person,
            r if r < p.person_proportion + p.auction_proportion => EventKind::Auction,
            _ => EventKind::Bid,
        }
    }

    /// Nexmark's `event_type` number.
    pub fn number(self) -> i32 {
        match self {
            EventKind::Person => 0,
            EventKind::Auction => 1,
            EventKind::Bid => 2,
        }
    }
}

/// A person's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Person {
    /// Person id (from 1000).
    pub id: i64,
    /// First and last name.
    pub name: String,
    /// E-mail address.
    pub email_address: String,
    /// Four groups of four digits.
    pub credit_card: String,
    /// City.
    pub city: String,
    /// US state.
    pub state: String,
    /// Padding to the average size.
    pub extra: String,
}

/// An auction's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Auction {
    /// Auction id (from 1000).
    pub id: i64,
    /// Item name.
    pub item_name: String,
    /// Description.
    pub description: String,
    /// Initial bid, cents.
    pub initial_bid: i64,
    /// Reserve price, cents.
    pub reserve: i64,
    /// Epoch milliseconds the auction ends.
    pub expires: i64,
    /// Person id of the seller.
    pub seller: i64,
    /// Category (10 … 14).
    pub category: i64,
    /// Padding to the average size.
    pub extra: String,
}

/// A bid's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bid {
    /// Auction id.
    pub auction: i64,
    /// Person id of the bidder.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Channel name.
    pub channel: String,
    /// The channel's URL.
    pub url: String,
    /// Padding to the average size.
    pub extra: String,
}

/// One event, reused from event to event: only the part of its kind is current.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// The event number (also its id).
    pub n: u64,
    /// Which part holds the event.
    pub kind: EventKind,
    /// Epoch milliseconds of event time.
    pub date_time: i64,
    /// The fields of a person event.
    pub person: Person,
    /// The fields of an auction event.
    pub auction: Auction,
    /// The fields of a bid event.
    pub bid: Bid,
}

impl Event {
    /// The canonical text line of the event (§7), without the newline, into `out` (appended).
    pub fn write_canonical(&self, out: &mut String) {
        let (n, t) = (self.n, self.date_time);
        // Writing into a String cannot fail.
        let _ = match self.kind {
            EventKind::Person => {
                let p = &self.person;
                write!(
                    out,
                    "{n}|P|{t}|{}|{}|{}|{}|{}|{}|{}",
                    p.id, p.name, p.email_address, p.credit_card, p.city, p.state, p.extra
                )
            }
            EventKind::Auction => {
                let a = &self.auction;
                write!(
                    out,
                    "{n}|A|{t}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                    a.id,
                    a.item_name,
                    a.description,
                    a.initial_bid,
                    a.reserve,
                    a.expires,
                    a.seller,
                    a.category,
                    a.extra
                )
            }
            EventKind::Bid => {
                let b = &self.bid;
                write!(out, "{n}|B|{t}|{}|{}|{}|{}|{}|{}", b.auction, b.bidder, b.price, b.channel, b.url, b.extra)
            }
        };
    }
}

/// `PRICE_TABLE[k] = round(100 · 10^(k/1000))`, k = 0 … 6000 (§5.4).
fn price_table() -> &'static [i64] {
    static TABLE: OnceLock<Vec<i64>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=PRICE_STEPS).map(|k| (10f64.powf(k as f64 / 1000.0) * 100.0).round() as i64).collect())
}

fn url_base(u: &mut JRandom) -> String {
    let mut s = String::from("https://www.nexmark.com/");
    next_string(u, 5, '_', &mut s);
    s.push('/');
    next_string(u, 5, '_', &mut s);
    s.push('/');
    next_string(u, 5, '_', &mut s);
    s.push_str("/item.htm?query=1");
    s
}

/// The URL of hot channel `i` (§5.6).
pub fn hot_url(i: usize) -> String {
    url_base(&mut JRandom::new(mix64(CHANNEL_SEED_BASE + 10_000 + i as u64) as i64))
}

/// The URL of regular channel `c` (§5.6).
pub fn channel_url(c: i32) -> String {
    let mut u = JRandom::new(mix64(CHANNEL_SEED_BASE + c as u64) as i64);
    let mut s = url_base(&mut u);
    if u.next_int_bounded(10) > 0 {
        let _ = write!(s, "&channel_id={}", (c as u32).reverse_bits() >> 1);
    }
    s
}

/// The channel URLs, made once (they are pure functions of the channel).
fn urls() -> &'static (Vec<String>, Vec<String>) {
    static URLS: OnceLock<(Vec<String>, Vec<String>)> = OnceLock::new();
    URLS.get_or_init(|| ((0..HOT_CHANNELS.len()).map(hot_url).collect(), (0..NUM_CHANNELS).map(channel_url).collect()))
}

/// `nextString(r, maxLength, special)` (§5.1), appended to `out`.
fn next_string(r: &mut JRandom, max_length: i32, special: char, out: &mut String) {
    let start = out.len();
    let len = 3 + r.next_int_bounded(max_length - 3);
    for _ in 0..len {
        if r.next_int_bounded(13) == 0 {
            out.push(special);
        } else {
            out.push((b'a' + r.next_int_bounded(26) as u8) as char);
        }
    }
    // Java's String.trim: only ' ' can occur at either end.
    let trimmed_end = out[start..].trim_end_matches(' ').len();
    out.truncate(start + trimmed_end);
    let lead = out[start..].len() - out[start..].trim_start_matches(' ').len();
    out.drain(start..start + lead);
}

/// `nextExactString(r, length)` (§5.2), appended to `out`.
fn next_exact_string(r: &mut JRandom, length: usize, out: &mut String) {
    let (mut left, mut x) = (0, 0u32);
    for _ in 0..length {
        if left == 0 {
            x = (r.next_int() as u32) >> 1;
            left = 6;
        }
        out.push((b'a' + (x % 26) as u8) as char);
        x /= 26;
        left -= 1;
    }
}

/// `nextExtra(r, currentSize, avgSize)` (§5.3), into `out` (cleared first).
fn next_extra(r: &mut JRandom, current: usize, avg: usize, out: &mut String) {
    out.clear();
    if current > avg {
        return;
    }
    let d = avg - current;
    let delta = (d + 2) / 5;
    let size = d - delta + if delta == 0 { 0 } else { r.next_int_bounded(2 * delta as i32) as usize };
    next_exact_string(r, size, out);
}

/// `nextPrice(r)` (§5.4): cents, log-uniform between 1 $ and 10⁶ $.
fn next_price(r: &mut JRandom) -> i64 {
    let u = r.next_int_bounded(PRICE_STEPS as i32 * 65536) as u32;
    let (k, f) = ((u >> 16) as usize, i64::from(u & 65535));
    let table = price_table();
    let (lo, hi) = (table[k], table[k + 1]);
    lo + (((hi - lo) * f) >> 16)
}

/// `nextLong(r, bound)` of §4.
fn next_long_bounded(r: &mut JRandom, bound: i64) -> i64 {
    if bound < i64::from(i32::MAX) {
        i64::from(r.next_int_bounded(bound as i32))
    } else {
        (r.next_long() % bound).abs()
    }
}

fn last_base0_person_id(n: u64, p: &Params) -> i64 {
    let total = p.total().max(1);
    let (epoch, off) = ((n / total) as i64, (n % total) as i64);
    epoch * p.person_proportion as i64 + off.min(p.person_proportion as i64 - 1)
}

fn last_base0_auction_id(n: u64, p: &Params) -> i64 {
    let total = p.total().max(1);
    let (person, auction) = (p.person_proportion as i64, p.auction_proportion as i64);
    let (mut epoch, mut off) = ((n / total) as i64, (n % total) as i64);
    if off < person {
        epoch -= 1;
        off = auction - 1;
    } else if off >= person + auction {
        off = auction - 1;
    } else {
        off -= person;
    }
    epoch * auction + off
}

fn next_base0_person_id(n: u64, r: &mut JRandom, p: &Params) -> i64 {
    let num = last_base0_person_id(n, p) + 1;
    let active = num.min(NUM_ACTIVE_PEOPLE);
    num - active + next_long_bounded(r, active + PERSON_ID_LEAD)
}

fn next_base0_auction_id(n: u64, r: &mut JRandom, p: &Params) -> i64 {
    let max = last_base0_auction_id(n, p);
    let min = (max - NUM_IN_FLIGHT_AUCTIONS).max(0);
    min + next_long_bounded(r, max - min + 1 + AUCTION_ID_LEAD)
}

/// Makes events at a rate of `tps` events per second of event time.
#[derive(Debug, Clone)]
pub struct Generator {
    tps: u64,
    p: Params,
    r: JRandom,
}

impl Generator {
    /// A generator of the spec's stream at `tps` (≥ 1) events per second of event time.
    pub fn new(tps: u64) -> Self {
        Generator::with_params(tps, Params::default())
    }

    /// A generator of a stream shaped by `p` (checked with [`Params::check`]).
    pub fn with_params(tps: u64, p: Params) -> Self {
        Generator { tps: tps.max(1), p, r: JRandom::new(0) }
    }

    /// Event `n`, into `e`.
    pub fn event(&mut self, n: u64, e: &mut Event) {
        let (r, p) = (&mut self.r, &self.p);
        r.set_seed(mix64(n) as i64);
        e.n = n;
        e.kind = EventKind::of(n, p);
        e.date_time = timestamp(n, self.tps);
        match e.kind {
            EventKind::Person => {
                let p_id = last_base0_person_id(n, p) + FIRST_PERSON_ID;
                let p = &mut e.person;
                p.id = p_id;
                p.name.clear();
                p.name.push_str(FIRST_NAMES[r.next_int_bounded(FIRST_NAMES.len() as i32) as usize]);
                p.name.push(' ');
                p.name.push_str(LAST_NAMES[r.next_int_bounded(LAST_NAMES.len() as i32) as usize]);
                p.email_address.clear();
                next_string(r, 7, ' ', &mut p.email_address);
                p.email_address.push('@');
                next_string(r, 5, ' ', &mut p.email_address);
                p.email_address.push_str(".com");
                p.credit_card.clear();
                for i in 0..4 {
                    if i > 0 {
                        p.credit_card.push(' ');
                    }
                    let _ = write!(p.credit_card, "{:04}", r.next_int_bounded(10_000));
                }
                p.city.clear();
                p.city.push_str(CITIES[r.next_int_bounded(CITIES.len() as i32) as usize]);
                p.state.clear();
                p.state.push_str(STATES[r.next_int_bounded(STATES.len() as i32) as usize]);
                let size =
                    8 + p.name.len() + p.email_address.len() + p.credit_card.len() + p.city.len() + p.state.len();
                next_extra(r, size, AVG_PERSON_BYTES, &mut p.extra);
            }
            EventKind::Auction => {
                let a = &mut e.auction;
                a.id = last_base0_auction_id(n, p) + FIRST_AUCTION_ID;
                let seller = if r.next_int_bounded(p.hot_seller_ratio as i32) > 0 {
                    (last_base0_person_id(n, p) / HOT_BATCH) * HOT_BATCH
                } else {
                    next_base0_person_id(n, r, p)
                };
                a.seller = seller + FIRST_PERSON_ID;
                a.category = FIRST_CATEGORY_ID + i64::from(r.next_int_bounded(NUM_CATEGORIES));
                a.initial_bid = next_price(r);
                let horizon = timestamp(n + p.auction_horizon(), self.tps) - e.date_time;
                a.expires = e.date_time + 1 + next_long_bounded(r, (2 * horizon).max(1));
                a.item_name.clear();
                next_string(r, 20, ' ', &mut a.item_name);
                a.description.clear();
                next_string(r, 100, ' ', &mut a.description);
                a.reserve = a.initial_bid + next_price(r);
                let size = 8 + a.item_name.len() + a.description.len() + 40;
                next_extra(r, size, AVG_AUCTION_BYTES, &mut a.extra);
            }
            EventKind::Bid => {
                let b = &mut e.bid;
                let auction = if r.next_int_bounded(p.hot_auction_ratio as i32) > 0 {
                    (last_base0_auction_id(n, p) / HOT_BATCH) * HOT_BATCH
                } else {
                    next_base0_auction_id(n, r, p)
                };
                b.auction = auction + FIRST_AUCTION_ID;
                let bidder = if r.next_int_bounded(p.hot_bidder_ratio as i32) > 0 {
                    (last_base0_person_id(n, p) / HOT_BATCH) * HOT_BATCH + 1
                } else {
                    next_base0_person_id(n, r, p)
                };
                b.bidder = bidder + FIRST_PERSON_ID;
                b.price = next_price(r);
                let (hot, regular) = urls();
                b.channel.clear();
                b.url.clear();
                if r.next_int_bounded(HOT_CHANNEL_RATIO) > 0 {
                    let i = r.next_int_bounded(HOT_CHANNELS.len() as i32) as usize;
                    b.channel.push_str(HOT_CHANNELS[i]);
                    b.url.push_str(&hot[i]);
                } else {
                    let c = r.next_int_bounded(NUM_CHANNELS);
                    let _ = write!(b.channel, "channel-{c}");
                    b.url.push_str(&regular[c as usize]);
                }
                next_extra(r, 32, AVG_BID_BYTES, &mut b.extra);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(from: u64, to: u64, tps: u64) -> String {
        let (mut g, mut e, mut out) = (Generator::new(tps), Event::default(), String::new());
        for n in from..to {
            g.event(n, &mut e);
            e.write_canonical(&mut out);
            out.push('\n');
        }
        out
    }

    fn digest(from: u64, to: u64, tps: u64) -> String {
        ring::digest::digest(&ring::digest::SHA256, lines(from, to, tps).as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn small_pieces_match_the_spec() {
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161D_100B_05E5);
        assert_eq!(mix64(1_000_000), 7_132_602_722_347_131_734);
        let mut r = JRandom::new(mix64(1) as i64);
        assert_eq!([r.next_int(), r.next_int(), r.next_int()], [-114_155_384, 1_953_723_181, -1_452_903_482]);
        assert_eq!(r.next_int_bounded(2), 1);
        assert_eq!(r.next_int_bounded(11), 6);
        assert_eq!(r.next_long(), 6_176_141_713_336_296_218);
        let mut r = JRandom::new(0);
        assert_eq!([r.next_int(), r.next_int_bounded(10), r.next_int_bounded(1000)], [-1_155_484_576, 8, 29]);
        let t = price_table();
        assert_eq!(
            [t[0], t[1], t[999], t[1000], t[2708], t[3000], t[5999], t[6000]],
            [100, 100, 998, 1000, 51050, 100_000, 99_770_006, 100_000_000]
        );
        assert_eq!(t.iter().sum::<i64>(), 43_479_423_994);
        assert_eq!(hot_url(0), "https://www.nexmark.com/tjeo/xwun/fjkr/item.htm?query=1");
        assert_eq!(hot_url(3), "https://www.nexmark.com/mx_u/bta/kap/item.htm?query=1");
        assert_eq!(channel_url(0), "https://www.nexmark.com/rvr/avna/bwjg/item.htm?query=1&channel_id=0");
        assert_eq!(channel_url(1), "https://www.nexmark.com/mxu/gni/wnz/item.htm?query=1&channel_id=1073741824");
        assert_eq!(channel_url(3), "https://www.nexmark.com/vjp/yaea/_jm/item.htm?query=1&channel_id=1610612736");
        assert_eq!(channel_url(9999), "https://www.nexmark.com/ggar/ake/ruz/item.htm?query=1&channel_id=2020737024");
        assert_eq!((0..NUM_CHANNELS).filter(|&c| channel_url(c).contains("&channel_id=")).count(), 9041);
    }

    #[test]
    fn timestamps_match_the_spec_at_other_rates() {
        let ns = [0u64, 1, 2, 3, 10, 49, 1666, 999_999, 1_000_000, 123_456_789, 10_000_000_000];
        let cases: [(u64, [i64; 11]); 4] = [
            (3, [0, 333, 666, 1000, 3333, 16333, 555_333, 333_333_000, 333_333_333, 41_152_263_000, 3_333_333_333_333]),
            (7, [0, 142, 285, 428, 1428, 7000, 238_000, 142_857_000, 142_857_142, 17_636_684_142, 1_428_571_428_571]),
            (7_000_000, [0, 0, 0, 0, 0, 0, 0, 142, 142, 17636, 1_428_571]),
            (10_000_000, [0, 0, 0, 0, 0, 0, 0, 99, 100, 12345, 1_000_000]),
        ];
        for (tps, want) in cases {
            let got: Vec<i64> = ns.iter().map(|&n| timestamp(n, tps) - BASE_TIME_MS).collect();
            assert_eq!(got, want, "tps {tps}");
        }
    }

    #[test]
    fn events_match_the_spec_vectors() {
        let got = lines(0, 20, DEFAULT_TPS)
            + &lines(1_000_000, 1_000_005, DEFAULT_TPS)
            + &lines(10_000_000, 10_000_005, DEFAULT_TPS);
        let want = include_str!("nexmark_vectors.txt");
        for (g, w) in got.lines().zip(want.lines()) {
            assert_eq!(g, w);
        }
        assert_eq!(got.lines().count(), want.lines().count());
    }

    #[test]
    fn digests_match_the_spec() {
        assert_eq!(digest(0, 100_000, DEFAULT_TPS), "cf59fbfd2ee2cf027e0aa1f713becf0d438c65cd8177dd1826c3bc3f8849cbd1");
        assert_eq!(
            digest(10_000_000, 10_100_000, DEFAULT_TPS),
            "b940554036f3d1dd08e5db65f7284e413c3c10a46f0900d8fc27b38c0cdfe470"
        );
        assert_eq!(digest(0, 100_000, 10_000_000), "08abe42ca38117c1a406b55b93cf3d02f494157ab4e31578f2b461040647bf13");
        assert_eq!(digest(0, 100_000, 3), "1a0d8e57cb4fc5f48c0e07508ade04eefe9c901c4dd4341f0bc63d4765a8a1d0");
    }

    #[test]
    fn a_million_events_match_the_spec_digest() {
        assert_eq!(
            digest(0, 1_000_000, DEFAULT_TPS),
            "e6b4c49aa7fb30e5f2cb50a0374d2d4f0e5bcab3f4bc2bf18fd13b3cde0b9c9c"
        );
    }
}
