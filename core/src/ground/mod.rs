//! The ground floor: the words every other floor is written in, depending on nothing of the
//! core. Time as microseconds, the calendar, the reference's units, a counter's role in the
//! request's verdict, a rule's metadata as the protobuf Struct it becomes, and a random UUID's
//! text.

pub mod calendar;
pub mod metadata;
pub mod time;
pub mod unit;
pub mod uuid;
pub mod verdict;
