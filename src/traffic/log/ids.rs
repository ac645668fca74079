//! The request ids a reader has read, and the numbers they run under.

use super::id::STRING_IDS_FROM;
use super::LogId;
use roaring::RoaringTreemap;

/// Request ids read so far. Numbers are kept in compressed bitmaps
/// (sequential ids take a few bytes per thousand, and a lookup stays in
/// cache); strings by a 128-bit hash of their text, 24 bytes each however
/// long the id.
pub(super) struct Ids {
    /// Numeric ids read, as written.
    numbers: RoaringTreemap,
    /// Numbers given so far.
    taken: RoaringTreemap,
    /// String ids read, with their numbers.
    names: hashbrown::HashMap<u128, u64, ahash::RandomState>,
    /// Numeric ids whose value was taken, with the numbers they got.
    moved: hashbrown::HashMap<u64, u64>,
    /// Request lines read.
    requests: u64,
    /// The next fresh number.
    fresh: u64,
}

impl Default for Ids {
    fn default() -> Self {
        Ids {
            numbers: RoaringTreemap::new(),
            taken: RoaringTreemap::new(),
            names: hashbrown::HashMap::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4)),
            moved: hashbrown::HashMap::new(),
            requests: 0,
            fresh: STRING_IDS_FROM,
        }
    }
}

impl Ids {
    /// Whether a request line with this id was read.
    pub fn is_read(&self, id: &LogId) -> bool {
        self.number_of(id).is_some()
    }

    /// The number the request with this id runs under (None if no request
    /// line with it was read).
    pub fn number_of(&self, id: &LogId) -> Option<u64> {
        match (id.as_number(), id.as_text()) {
            (Some(v), _) if self.numbers.contains(v) => Some(self.moved.get(&v).copied().unwrap_or(v)),
            (_, Some(t)) => self.names.get(&self.hash(t)).copied(),
            _ => None,
        }
    }

    /// A request line's id, not read before: gives it its number.
    pub fn read(&mut self, id: &mut LogId) {
        self.requests += 1;
        let wanted = id.as_number().unwrap_or(self.requests);
        let n = if self.taken.contains(wanted) {
            self.fresh += 1;
            self.fresh - 1
        } else {
            wanted
        };
        self.taken.insert(n);
        match (id.as_number(), id.as_text()) {
            (Some(v), _) => {
                self.numbers.insert(v);
                if n != v {
                    self.moved.insert(v, n);
                }
            }
            (_, Some(t)) => {
                let h = self.hash(t);
                self.names.insert(h, n);
            }
            _ => {}
        }
        id.number(n);
    }

    fn hash(&self, text: &str) -> u128 {
        let low = self.names.hasher().hash_one(text);
        let high = ahash::RandomState::with_seeds(5, 6, 7, 8).hash_one(text);
        (u128::from(high) << 64) | u128::from(low)
    }
}
