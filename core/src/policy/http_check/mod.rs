//! nginx's `auth_request` check (`/check`, `/check/<profile>`): how its headers become a
//! request ([`headers`]) and the profiles that map other headers onto descriptors ([`profile`]).

pub mod headers;
pub mod profile;
