//! A vector search's filter over key-value values (decision 0033 §3, docs/protocol.md
//! *VECTOR_SEARCH*): LangGraph's filter semantics (its InMemoryStore's and PostgresStore's),
//! parsed once per search and evaluated on each candidate's value in rank order.
//!
//! A filter is a JSON object; each member `field: condition` must hold of the value's
//! top-level `field` (absent reads as null). A condition is an object of operators (`$eq`,
//! `$ne`, `$gt`, `$gte`, `$lt`, `$lte`), an object without operators (an object field by
//! field, each member a condition again), an array (element by element, same length) or a
//! scalar (equality; numbers compare as numbers, so 1 equals 1.0). An unknown operator is
//! refused when the filter is parsed, never ignored. A value that is not a JSON object
//! passes no filter.

use serde_json::Value;

/// Nesting a filter may have (objects and arrays within conditions).
const FILTER_DEPTH_MAX: usize = 32;

#[derive(Clone, Debug, PartialEq)]
pub struct ValueFilter {
    members: Vec<(String, Condition)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Condition {
    Operators(Vec<(Operator, Value)>),
    Fields(Vec<(String, Condition)>),
    Elements(Vec<Condition>),
    Equal(Value),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl ValueFilter {
    /// The filter `bytes` hold; the error says what is wrong with it.
    pub fn parse(bytes: &[u8]) -> Result<ValueFilter, String> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| format!("the filter is not JSON: {error}"))?;
        let Value::Object(members) = value else {
            return Err("the filter is not a JSON object of field: condition".into());
        };
        let members = members
            .into_iter()
            .map(|(field, condition)| Ok((field, condition_of(condition, 1)?)))
            .collect::<Result<_, String>>()?;
        Ok(ValueFilter { members })
    }

    /// Whether the value (JSON bytes) passes every member.
    pub fn passes(&self, value: &[u8]) -> bool {
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(value) else {
            return false;
        };
        self.members
            .iter()
            .all(|(field, condition)| matches(fields.get(field).unwrap_or(&Value::Null), condition))
    }
}

fn condition_of(condition: Value, depth: usize) -> Result<Condition, String> {
    if depth > FILTER_DEPTH_MAX {
        return Err(format!("the filter nests deeper than {FILTER_DEPTH_MAX}"));
    }
    Ok(match condition {
        Value::Object(members) if members.keys().any(|key| key.starts_with('$')) => {
            let operators = members
                .into_iter()
                .map(|(name, operand)| Ok((operator(&name)?, operand)))
                .collect::<Result<_, String>>()?;
            Condition::Operators(operators)
        }
        Value::Object(members) => Condition::Fields(
            members
                .into_iter()
                .map(|(field, condition)| Ok((field, condition_of(condition, depth + 1)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Array(elements) => Condition::Elements(
            elements
                .into_iter()
                .map(|element| condition_of(element, depth + 1))
                .collect::<Result<_, String>>()?,
        ),
        scalar => Condition::Equal(scalar),
    })
}

fn operator(name: &str) -> Result<Operator, String> {
    Ok(match name {
        "$eq" => Operator::Eq,
        "$ne" => Operator::Ne,
        "$gt" => Operator::Gt,
        "$gte" => Operator::Gte,
        "$lt" => Operator::Lt,
        "$lte" => Operator::Lte,
        other => {
            return Err(format!(
                "the filter's operator {other:?} is not one of $eq, $ne, $gt, $gte, $lt, $lte"
            ));
        }
    })
}

fn matches(value: &Value, condition: &Condition) -> bool {
    match condition {
        Condition::Operators(operators) => operators
            .iter()
            .all(|(operator, operand)| compare(value, *operator, operand)),
        Condition::Fields(members) => match value {
            Value::Object(fields) => members.iter().all(|(field, condition)| {
                matches(fields.get(field).unwrap_or(&Value::Null), condition)
            }),
            _ => false,
        },
        Condition::Elements(conditions) => match value {
            Value::Array(elements) => {
                elements.len() == conditions.len()
                    && elements
                        .iter()
                        .zip(conditions)
                        .all(|(element, condition)| matches(element, condition))
            }
            _ => false,
        },
        Condition::Equal(expected) => equal(value, expected),
    }
}

fn compare(value: &Value, operator: Operator, operand: &Value) -> bool {
    match operator {
        Operator::Eq => equal(value, operand),
        Operator::Ne => !equal(value, operand),
        Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
            let (Some(left), Some(right)) = (value.as_f64(), operand.as_f64()) else {
                return false;
            };
            match operator {
                Operator::Gt => left > right,
                Operator::Gte => left >= right,
                Operator::Lt => left < right,
                _ => left <= right,
            }
        }
    }
}

/// JSON equality with numbers compared as numbers.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| equal(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, value)| b.get(key).is_some_and(|other| equal(value, other)))
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(filter: &str, value: &str) -> bool {
        ValueFilter::parse(filter.as_bytes())
            .unwrap()
            .passes(value.as_bytes())
    }

    #[test]
    fn langgraphs_operators_and_equality() {
        let value = r#"{"color": "red", "score": 4.5, "n": 1, "tags": ["a", "b"],
                        "meta": {"kind": "note", "rank": 2}}"#;
        assert!(passes(r#"{"color": "red"}"#, value));
        assert!(!passes(r#"{"color": "blue"}"#, value));
        assert!(passes(r#"{"n": 1.0}"#, value), "numbers as numbers");
        assert!(passes(r#"{"score": {"$gt": 4, "$lte": 4.5}}"#, value));
        assert!(!passes(r#"{"score": {"$lt": 4}}"#, value));
        assert!(passes(r#"{"color": {"$ne": "blue"}}"#, value));
        assert!(passes(r#"{"tags": ["a", "b"]}"#, value));
        assert!(!passes(r#"{"tags": ["a"]}"#, value));
        assert!(
            passes(r#"{"meta": {"kind": "note"}}"#, value),
            "field by field"
        );
        assert!(passes(r#"{"meta": {"rank": {"$gte": 2}}}"#, value));
        assert!(passes(r#"{"absent": null}"#, value), "absent reads as null");
        assert!(
            !passes(r#"{"color": {"$gt": 1}}"#, value),
            "a string is no number"
        );
        assert!(passes("{}", value));
        assert!(!passes(r#"{"color": "red"}"#, "[1, 2]"), "not an object");
        assert!(!passes("{}", "not json"));
    }

    #[test]
    fn what_it_cannot_evaluate_is_refused() {
        for (filter, says) in [
            (r#"{"a": {"$regex": "x"}}"#, "$regex"),
            (r#"{"a": {"$eq": 1, "b": 2}}"#, "\"b\""),
            ("[1]", "object"),
            ("{", "not JSON"),
        ] {
            let error = ValueFilter::parse(filter.as_bytes()).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
        let deep = "[".repeat(40) + &"]".repeat(40);
        let error = ValueFilter::parse(format!(r#"{{"a": {deep}}}"#).as_bytes()).unwrap_err();
        assert!(error.contains("deeper"), "{error}");
    }
}
