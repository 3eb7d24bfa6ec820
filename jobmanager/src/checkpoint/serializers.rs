//! A savepoint's serializers judged without the formats' crates: the job manager collects the pairs a check
//! needs ([`Asked`], run through the verdicts once), a task manager judges them by Avro's and Protobuf's own
//! rules, and the answers ([`Judgements`]) judge the verdicts for real.

use std::cell::RefCell;
use std::collections::HashMap;
use weir_common::state::serializer::{Resolution, SerializerJudge, SerializerSnapshot};

/// A judge that answers every pair "as is" and records which pairs it was asked (and which schemas' text).
#[derive(Default)]
pub struct Asked {
    pairs: RefCell<Vec<(SerializerSnapshot, SerializerSnapshot)>>,
}

impl Asked {
    /// The distinct pairs asked, in the order first asked.
    pub fn into_pairs(self) -> Vec<(SerializerSnapshot, SerializerSnapshot)> {
        let mut pairs = self.pairs.into_inner();
        let mut seen = std::collections::HashSet::new();
        pairs.retain(|p| seen.insert(p.clone()));
        pairs
    }
}

impl SerializerJudge for Asked {
    fn resolve(&self, written: &SerializerSnapshot, reading: &SerializerSnapshot) -> Resolution {
        self.pairs.borrow_mut().push((written.clone(), reading.clone()));
        Resolution::AsIs
    }

    fn schema_text(&self, snapshot: &SerializerSnapshot) -> String {
        snapshot.schema.clone()
    }
}

/// A task manager's answers for the pairs [`Asked`] collected.
#[derive(Default)]
pub struct Judgements {
    resolutions: HashMap<(SerializerSnapshot, SerializerSnapshot), Resolution>,
    texts: HashMap<SerializerSnapshot, String>,
}

impl Judgements {
    /// Records the answer for `written` read by `reading`, with both schemas as a person reads them.
    pub fn insert(
        &mut self,
        written: SerializerSnapshot,
        reading: SerializerSnapshot,
        resolution: Resolution,
        texts: (String, String),
    ) {
        self.texts.insert(written.clone(), texts.0);
        self.texts.insert(reading.clone(), texts.1);
        self.resolutions.insert((written, reading), resolution);
    }
}

impl SerializerJudge for Judgements {
    fn resolve(&self, written: &SerializerSnapshot, reading: &SerializerSnapshot) -> Resolution {
        // Every pair the verdicts ask was asked before: a missing one is a bug, refused rather than restored.
        self.resolutions.get(&(written.clone(), reading.clone())).cloned().unwrap_or_else(|| {
            Resolution::Incompatible(format!(
                "no task manager judged {} against {}",
                reading.describe(),
                written.describe()
            ))
        })
    }

    fn schema_text(&self, snapshot: &SerializerSnapshot) -> String {
        self.texts.get(snapshot).cloned().unwrap_or_else(|| snapshot.schema.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_pairs_come_once_and_judgements_answer_them() {
        let (a, b) = (SerializerSnapshot::signature("u64"), SerializerSnapshot::signature("string"));
        let asked = Asked::default();
        assert_eq!(asked.resolve(&a, &b), Resolution::AsIs);
        asked.resolve(&a, &a);
        asked.resolve(&a, &b);
        assert_eq!(asked.into_pairs(), vec![(a.clone(), b.clone()), (a.clone(), a.clone())]);

        let mut judged = Judgements::default();
        judged.insert(a.clone(), b.clone(), Resolution::Incompatible("changed".into()), ("A".into(), "B".into()));
        assert_eq!(judged.resolve(&a, &b), Resolution::Incompatible("changed".into()));
        assert_eq!((judged.schema_text(&a), judged.schema_text(&b)), ("A".into(), "B".into()));
        let Resolution::Incompatible(why) = judged.resolve(&b, &a) else { panic!("an unjudged pair restored") };
        assert!(why.contains("no task manager judged"), "{why}");
    }
}
