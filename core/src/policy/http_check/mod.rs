//! nginx's `auth_request` check (`/check`, `/check/<profile>`) and Envoy's ext_authz: how the
//! check headers become a request ([`headers`]), the profiles that map other headers and the
//! request's attributes onto descriptors ([`profile`]) and which profile an ext_authz call
//! uses ([`selection`]).

pub mod headers;
pub mod profile;
pub mod selection;
