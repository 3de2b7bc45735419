//! The CEL of Limitador's limits: conditions (`descriptors[0]['method'] == 'GET'`) and
//! variables (`descriptors[0].user`), compiled at load and evaluated per call the way
//! limitador 0.14 evaluates them, with the same `cel` crate.
//!
//! What a call binds: `descriptors`, the list of the request's descriptors, each a map of its
//! entries (Limitador's HTTP API binds its `values` as `descriptors[0]`). Every limit also sees
//! `limit.name` and `limit.id`.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Map, Value};
use cel::{Context, ExecutionError, Program};

/// A compiled expression, with its source and the variables it reads.
#[derive(Debug)]
pub struct Expression {
    source: String,
    program: Program,
    variables: Vec<String>,
}

impl Expression {
    /// Compiles `source`; the error is the CEL parser's, for the caller to place.
    pub fn compile(source: &str) -> Result<Self, String> {
        let program = Program::compile(source).map_err(|errors| errors.to_string())?;
        let variables = program
            .references()
            .variables()
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Self {
            source: source.to_owned(),
            program,
            variables,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether every variable this reads is bound (`limit` counts when `limit_bound`).
    fn reads_only_bound(&self, bindings: &Bindings, limit_bound: bool) -> bool {
        self.variables
            .iter()
            .all(|name| (limit_bound && name == "limit") || bindings.names.contains(name))
    }

    /// A condition: true, false, or an error (a value that is not a boolean, a function
    /// misused…). A missing key or variable is false.
    pub fn test(&self, scope: &Scope<'_>) -> Result<bool, String> {
        if !self.reads_only_bound(scope.bindings, true) {
            return Ok(false);
        }
        match self.program.execute(&scope.context) {
            Ok(Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!("expected a boolean, got {}", describe(&other))),
            Err(ExecutionError::NoSuchKey(_)) => Ok(false),
            Err(error) => Err(error.to_string()),
        }
    }

    /// Whether the call binds every variable this variable expression reads (Limitador
    /// leaves a limit out of a call that does not).
    pub fn is_bound_by(&self, bindings: &Bindings) -> bool {
        self.reads_only_bound(bindings, false)
    }

    /// A variable's value as text; `None` when a key it reads is missing (the limit then does
    /// not apply), an error for a list, map or other value with no text.
    pub fn value(&self, scope: &Scope<'_>) -> Result<Option<String>, String> {
        match self.program.execute(&scope.context) {
            Ok(Value::Int(number)) => Ok(Some(number.to_string())),
            Ok(Value::UInt(number)) => Ok(Some(number.to_string())),
            Ok(Value::Float(number)) => Ok(Some(number.to_string())),
            Ok(Value::String(text)) => Ok(Some(text.to_string())),
            Ok(Value::Null) => Ok(Some("null".to_owned())),
            Ok(Value::Bool(truth)) => Ok(Some(truth.to_string())),
            Ok(other) => Err(format!(
                "expected a value with text, got {}",
                describe(&other)
            )),
            Err(ExecutionError::NoSuchKey(_)) => Ok(None),
            Err(error) => Err(error.to_string()),
        }
    }
}

fn describe(value: &Value) -> String {
    let kind = match value {
        Value::List(_) => "a list",
        Value::Map(_) => "a map",
        Value::Function(..) => "a function",
        Value::Bytes(_) => "bytes",
        Value::Duration(_) => "a duration",
        Value::Timestamp(_) => "a timestamp",
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => "a number",
        Value::String(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Opaque(_) => "an opaque value",
    };
    kind.to_owned()
}

/// What one call binds, ready for evaluation.
pub struct Bindings {
    names: Vec<String>,
    context: Context<'static>,
}

impl Bindings {
    /// An Envoy RLS or Kuadrant call: `descriptors`, each descriptor a map of its entries.
    pub fn descriptors(descriptors: Vec<HashMap<String, String>>) -> Self {
        let list: Vec<Value> = descriptors
            .into_iter()
            .map(|entries| Value::Map(Map::from(entries)))
            .collect();
        let mut context = Context::default();
        context.add_variable_from_value("descriptors", Value::List(Arc::new(list)));
        Self {
            names: vec!["descriptors".to_owned()],
            context,
        }
    }

    /// The scope one limit's expressions are evaluated in: the call's bindings and `limit`.
    pub fn for_limit(&self, name: Option<&str>, id: Option<&str>) -> Scope<'_> {
        let text = |value: Option<&str>| {
            value.map_or(Value::Null, |text| Value::String(Arc::new(text.to_owned())))
        };
        let limit = Map::from(HashMap::from([("name", text(name)), ("id", text(id))]));
        let mut context = self.context.new_inner_scope();
        context.add_variable_from_value("limit", Value::Map(limit));
        Scope {
            bindings: self,
            context,
        }
    }
}

/// One limit's evaluation scope.
pub struct Scope<'a> {
    bindings: &'a Bindings,
    context: Context<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(entries: &[(&str, &str)]) -> HashMap<String, String> {
        entries
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn conditions_and_variables_read_the_descriptors() -> Result<(), String> {
        let bindings =
            Bindings::descriptors(vec![descriptor(&[("method", "GET"), ("user", "ann")])]);
        let scope = bindings.for_limit(Some("per-user"), None);
        assert!(Expression::compile("descriptors[0]['method'] == 'GET'")?.test(&scope)?);
        assert!(!Expression::compile("descriptors[0].method == 'POST'")?.test(&scope)?);
        assert!(!Expression::compile("descriptors[0].missing == 'x'")?.test(&scope)?);
        assert!(Expression::compile("limit.name == 'per-user'")?.test(&scope)?);
        let user = Expression::compile("descriptors[0].user")?;
        assert_eq!(user.value(&scope)?, Some("ann".to_owned()));
        assert_eq!(
            Expression::compile("descriptors[0].nobody")?.value(&scope)?,
            None
        );
        assert!(Expression::compile("descriptors[0]")?
            .value(&scope)
            .is_err());
        assert!(Expression::compile("descriptors[0].user + 1")?
            .test(&scope)
            .is_err());
        Ok(())
    }

    #[test]
    fn a_syntax_error_is_a_compile_error() {
        assert!(Expression::compile("descriptors[0].method ==").is_err());
    }
}
