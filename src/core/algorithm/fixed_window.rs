use super::{Evaluation, Hits, Quota, State};
use crate::core::time::Micros;

pub(super) fn evaluate(quota: &Quota, state: Option<&State>, now: Micros, hits: Hits) -> Evaluation {
    let _ = (quota, state, now, hits);
    todo!()
}
