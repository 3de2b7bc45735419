//! A request as an ext_authz caller describes it: its headers (lower-case names) and the
//! attributes check profiles read like headers (`:method`, `:path`, `:authority`, `:scheme`,
//! `:source-address`, see `core::policy::http_check::profile`). The gRPC form fills them from
//! Envoy's `AttributeContext`, the HTTP form from the call itself or the `X-Forwarded-*` headers
//! Caddy and Traefik send.

use std::borrow::Cow;

use crate::core::policy::http_check::profile::{
    AUTHORITY_ATTRIBUTE, METHOD_ATTRIBUTE, PATH_ATTRIBUTE, SCHEME_ATTRIBUTE,
    SOURCE_ADDRESS_ATTRIBUTE,
};

/// The request under check.
#[derive(Debug, Default)]
pub(crate) struct RequestAttributes<'a> {
    /// `(lower-case name, value)`; a name sent twice appears twice, the first one is read.
    pub(crate) headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub(crate) method: Cow<'a, str>,
    pub(crate) path: Cow<'a, str>,
    pub(crate) authority: Cow<'a, str>,
    pub(crate) scheme: Cow<'a, str>,
    pub(crate) source_address: Cow<'a, str>,
}

impl RequestAttributes<'_> {
    /// The value a profile entry reads under `name` (lower-case): an attribute or a header.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        let attribute = match name {
            METHOD_ATTRIBUTE => &self.method,
            PATH_ATTRIBUTE => &self.path,
            AUTHORITY_ATTRIBUTE => &self.authority,
            SCHEME_ATTRIBUTE => &self.scheme,
            SOURCE_ADDRESS_ATTRIBUTE => &self.source_address,
            _ => {
                return self
                    .headers
                    .iter()
                    .find(|(present, _)| present == name)
                    .map(|(_, value)| value.as_ref())
            }
        };
        Some(attribute.as_ref()).filter(|value| !value.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_headers_are_read_by_name() {
        let attributes = RequestAttributes {
            headers: vec![
                ("x-api-key".into(), "k1".into()),
                ("x-api-key".into(), "k2".into()),
            ],
            method: "POST".into(),
            path: "/v1/items?a=1".into(),
            ..RequestAttributes::default()
        };
        assert_eq!(attributes.get("x-api-key"), Some("k1"));
        assert_eq!(attributes.get(":method"), Some("POST"));
        assert_eq!(attributes.get(":path"), Some("/v1/items?a=1"));
        assert_eq!(attributes.get(":scheme"), None);
        assert_eq!(attributes.get("x-other"), None);
    }
}
