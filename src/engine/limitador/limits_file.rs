//! Limitador's limits file, as Limitador reads it: a YAML list of limits, each with its
//! `namespace`, `max_value`, `seconds`, CEL `conditions` and `variables`, and an optional
//! `name` and `id`. Every expression is compiled at load; an expression that does not compile
//! is a load error naming the limit and the expression.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::expression::Expression;

/// One limit as the file writes it. `conditions` and `variables` may be left out (Limitador
/// requires both keys; an empty list is the same limit).
#[derive(Debug, Deserialize)]
struct LimitEntry {
    #[serde(default)]
    id: Option<String>,
    namespace: String,
    #[serde(default)]
    max_value: u64,
    seconds: u64,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    conditions: Vec<String>,
    #[serde(default)]
    variables: Vec<String>,
}

/// A loaded limit.
#[derive(Debug)]
pub struct Limit {
    pub id: Option<String>,
    pub namespace: String,
    pub max_value: u64,
    pub seconds: u64,
    pub name: Option<String>,
    /// Sorted by source and without repeats, as Limitador keeps them: the limit's identity.
    pub conditions: Vec<Expression>,
    pub variables: Vec<Expression>,
    /// The limit's identity as the prefix of its counters' keys (`counter_key`).
    identity: String,
}

impl Limit {
    /// The key of this limit's counter for these variable values (name → value, sorted).
    pub fn counter_key(&self, values: &BTreeMap<String, String>) -> String {
        let values = serde_json::to_string(values).unwrap_or_default();
        format!("{}{values}]", self.identity)
    }

    /// The start of every key of this limit's counters.
    pub fn key_prefix(&self) -> &str {
        &self.identity
    }

    /// How this limit is named in errors: its name, else its place in the file.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("in namespace {:?}", self.namespace))
    }
}

/// The start of the keys of every counter of `namespace`.
pub fn namespace_key_prefix(namespace: &str) -> String {
    format!("[{},", serde_json::to_string(namespace).unwrap_or_default())
}

/// The limits of one file, by namespace.
#[derive(Debug, Default)]
pub struct LimitSet {
    by_namespace: BTreeMap<String, Vec<Arc<Limit>>>,
}

impl LimitSet {
    pub fn namespace(&self, namespace: &str) -> &[Arc<Limit>] {
        self.by_namespace
            .get(namespace)
            .map_or(&[], |limits| limits.as_slice())
    }

    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace)
    }

    pub fn limit_count(&self) -> usize {
        self.by_namespace.values().map(Vec::len).sum()
    }
}

/// A limits file that cannot be loaded: what is wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum LimitsFileError {
    #[error("cannot read Limitador's limits file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error(
        "Limitador's limits file {path} is not a YAML list of limits (namespace, max_value, \
         seconds, conditions, variables, name): {reason}"
    )]
    Parse { path: String, reason: String },
    #[error(
        "Limitador's limits file {path}: limit {limit}: the {role} `{expression}` is not valid \
         CEL: {reason}"
    )]
    Expression {
        path: String,
        limit: String,
        role: &'static str,
        expression: String,
        reason: String,
    },
    #[error(
        "Limitador's limits file {path}: limit {limit} has `seconds: 0`; a window must last at \
         least a second"
    )]
    ZeroWindow { path: String, limit: String },
}

/// Reads and compiles the limits file at `path`.
pub fn load(path: &Path) -> Result<LimitSet, LimitsFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| LimitsFileError::Read {
        path: path.display().to_string(),
        reason: error.to_string(),
    })?;
    parse(&text, &path.display().to_string())
}

/// Compiles the limits of `text`; `path` names the file in errors.
pub fn parse(text: &str, path: &str) -> Result<LimitSet, LimitsFileError> {
    let entries: Option<Vec<LimitEntry>> =
        serde_yaml::from_str(text).map_err(|error| LimitsFileError::Parse {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    let mut set = LimitSet::default();
    let mut identities = HashSet::new();
    for (index, entry) in entries.unwrap_or_default().into_iter().enumerate() {
        let limit = compile(entry, index, path)?;
        // Limitador keeps one limit per identity (namespace, seconds, conditions, variables).
        if !identities.insert(limit.identity.clone()) {
            tracing::warn!(
                limit = %limit.label(),
                "Limitador's limits file {path}: limit #{} repeats an earlier limit's \
                 namespace, seconds, conditions and variables; the earlier one is kept",
                index + 1
            );
            continue;
        }
        set.by_namespace
            .entry(limit.namespace.clone())
            .or_default()
            .push(Arc::new(limit));
    }
    Ok(set)
}

fn compile(entry: LimitEntry, index: usize, path: &str) -> Result<Limit, LimitsFileError> {
    let label = entry
        .name
        .clone()
        .unwrap_or_else(|| format!("#{} (namespace {:?})", index + 1, entry.namespace));
    if entry.seconds == 0 {
        return Err(LimitsFileError::ZeroWindow {
            path: path.to_owned(),
            limit: label,
        });
    }
    let conditions = compile_all(entry.conditions, "condition", &label, path)?;
    let variables = compile_all(entry.variables, "variable", &label, path)?;
    let identity = identity(&entry.namespace, entry.seconds, &conditions, &variables);
    Ok(Limit {
        id: entry.id,
        namespace: entry.namespace,
        max_value: entry.max_value,
        seconds: entry.seconds,
        name: entry.name,
        conditions,
        variables,
        identity,
    })
}

fn compile_all(
    mut sources: Vec<String>,
    role: &'static str,
    label: &str,
    path: &str,
) -> Result<Vec<Expression>, LimitsFileError> {
    sources.sort();
    sources.dedup();
    sources
        .iter()
        .map(|source| {
            Expression::compile(source).map_err(|reason| LimitsFileError::Expression {
                path: path.to_owned(),
                limit: label.to_owned(),
                role,
                expression: source.clone(),
                reason,
            })
        })
        .collect()
}

/// `["namespace",seconds,[conditions],[variables],` — completed by each counter's values.
fn identity(
    namespace: &str,
    seconds: u64,
    conditions: &[Expression],
    variables: &[Expression],
) -> String {
    let sources = |expressions: &[Expression]| {
        let list: Vec<&str> = expressions.iter().map(Expression::source).collect();
        serde_json::to_string(&list).unwrap_or_default()
    };
    format!(
        "{}{seconds},{},{},",
        namespace_key_prefix(namespace),
        sources(conditions),
        sources(variables)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limitador_file_loads_by_namespace() -> Result<(), LimitsFileError> {
        let set = parse(
            "- namespace: api\n  max_value: 10\n  seconds: 60\n  name: per-user\n  conditions:\n  \
             - \"descriptors[0]['method'] == 'GET'\"\n  variables:\n  - descriptors[0].user\n\
             - namespace: api\n  max_value: 5\n  seconds: 1\n  conditions: []\n  variables: []\n",
            "limits.yaml",
        )?;
        assert_eq!(set.namespace("api").len(), 2);
        assert!(set.namespace("other").is_empty());
        let prefix = namespace_key_prefix("api");
        assert!(set.namespace("api")[0]
            .counter_key(&BTreeMap::new())
            .starts_with(&prefix));
        Ok(())
    }

    #[test]
    fn a_bad_expression_names_the_limit_and_the_expression() {
        let error = parse(
            "- namespace: api\n  max_value: 10\n  seconds: 60\n  name: per-user\n  \
             conditions: [\"descriptors[0].method ==\"]\n  variables: []\n",
            "limits.yaml",
        )
        .map(|_| ())
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
        assert!(error.contains("per-user"), "{error}");
        assert!(error.contains("descriptors[0].method =="), "{error}");
    }

    #[test]
    fn a_file_that_is_not_a_list_is_refused() {
        assert!(parse("namespace: api\n", "limits.yaml").is_err());
        assert!(parse("", "limits.yaml").is_ok_and(|set| set.limit_count() == 0));
    }
}
