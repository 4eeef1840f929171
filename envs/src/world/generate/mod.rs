use crate::world::db::Db;
pub(crate) const MIN_PEOPLE: usize = 30;
pub(crate) fn generate(_seed: u64, _people: usize) -> Db { Db::default() }
