//! The ground floor: the words every other floor is written in, depending on nothing of the
//! core. Time as microseconds, the calendar, the reference's units, a counter's role in the
//! request's verdict, and a rule's metadata as the protobuf Struct it becomes.

pub mod calendar;
pub mod metadata;
pub mod time;
pub mod unit;
pub mod verdict;
