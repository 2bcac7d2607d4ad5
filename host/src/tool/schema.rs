//! A small JSON-schema subset for tool parameters: enough to validate what models send and to
//! declare the tools to providers as JSON Schema.
//!
//! Supported: `string`, `integer` (optional bounds), `number`, `boolean`, `array` of one item
//! schema, and `object` with named properties (required or optional) and a policy for extra
//! properties. Validation reports the first violation with a JSON-pointer-like path.

use baton_protocol::{Map, Value};

/// A value schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    /// A JSON string.
    String,
    /// An integral number within optional inclusive bounds.
    Integer {
        /// Smallest allowed value.
        minimum: Option<i64>,
        /// Largest allowed value.
        maximum: Option<i64>,
    },
    /// Any JSON number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// An array whose items all match the inner schema.
    Array(Box<Schema>),
    /// An object.
    Object(ObjectSchema),
}

impl Schema {
    /// An integer with no bounds.
    pub fn integer() -> Self {
        Self::Integer {
            minimum: None,
            maximum: None,
        }
    }

    /// An integer of at least `min`.
    pub fn integer_min(min: i64) -> Self {
        Self::Integer {
            minimum: Some(min),
            maximum: None,
        }
    }

    /// The JSON Schema text form (what providers receive).
    pub fn to_json_schema(&self) -> Value {
        let mut m = Map::new();
        match self {
            Self::String => {
                m.insert("type", "string".into());
            }
            Self::Integer { minimum, maximum } => {
                m.insert("type", "integer".into());
                if let Some(v) = minimum.and_then(|v| Value::try_from(v).ok()) {
                    m.insert("minimum", v);
                }
                if let Some(v) = maximum.and_then(|v| Value::try_from(v).ok()) {
                    m.insert("maximum", v);
                }
            }
            Self::Number => {
                m.insert("type", "number".into());
            }
            Self::Boolean => {
                m.insert("type", "boolean".into());
            }
            Self::Array(items) => {
                m.insert("type", "array".into());
                m.insert("items", items.to_json_schema());
            }
            Self::Object(o) => return o.to_json_schema(),
        }
        Value::Map(m)
    }

    /// Checks `value`.
    ///
    /// # Errors
    /// The first [`SchemaViolation`] found (depth-first, properties in declaration order).
    pub fn validate(&self, value: &Value) -> Result<(), SchemaViolation> {
        self.check(value, "")
    }

    fn check(&self, value: &Value, path: &str) -> Result<(), SchemaViolation> {
        let bad = |expected: &str| SchemaViolation {
            path: display_path(path),
            message: format!("expected {expected}, got {}", kind(value)),
        };
        match (self, value) {
            (Self::String, Value::String(_))
            | (Self::Number, Value::Number(_))
            | (Self::Boolean, Value::Bool(_)) => Ok(()),
            (Self::Integer { minimum, maximum }, Value::Number(n)) => {
                let Some(i) = n.as_i64() else {
                    return Err(bad("integer"));
                };
                if let Some(min) = minimum.filter(|min| i < *min) {
                    return Err(SchemaViolation {
                        path: display_path(path),
                        message: format!("must be at least {min}, got {i}"),
                    });
                }
                if let Some(max) = maximum.filter(|max| i > *max) {
                    return Err(SchemaViolation {
                        path: display_path(path),
                        message: format!("must be at most {max}, got {i}"),
                    });
                }
                Ok(())
            }
            (Self::Array(items), Value::Array(values)) => {
                for (i, v) in values.iter().enumerate() {
                    items.check(v, &format!("{path}/{i}"))?;
                }
                Ok(())
            }
            (Self::Object(o), Value::Map(_)) => o.check(value, path),
            (Self::String, _) => Err(bad("string")),
            (Self::Integer { .. }, _) => Err(bad("integer")),
            (Self::Number, _) => Err(bad("number")),
            (Self::Boolean, _) => Err(bad("boolean")),
            (Self::Array(_), _) => Err(bad("array")),
            (Self::Object(_), _) => Err(bad("object")),
        }
    }
}

/// One named property of an object schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// Key.
    pub name: String,
    /// Shown to the model.
    pub description: String,
    /// Value schema.
    pub schema: Schema,
    /// Whether the key must be present.
    pub required: bool,
}

/// An object with declared properties.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectSchema {
    /// Properties in declaration order.
    pub properties: Vec<Property>,
    /// Whether undeclared keys are accepted.
    pub additional_properties: bool,
}

impl ObjectSchema {
    /// An object with no properties that rejects undeclared keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a required property.
    #[must_use]
    pub fn required(mut self, name: &str, schema: Schema, description: &str) -> Self {
        self.properties.push(Property {
            name: name.into(),
            description: description.into(),
            schema,
            required: true,
        });
        self
    }

    /// Adds an optional property.
    #[must_use]
    pub fn optional(mut self, name: &str, schema: Schema, description: &str) -> Self {
        self.properties.push(Property {
            name: name.into(),
            description: description.into(),
            schema,
            required: false,
        });
        self
    }

    /// Accepts undeclared keys.
    #[must_use]
    pub fn allow_additional(mut self) -> Self {
        self.additional_properties = true;
        self
    }

    /// The JSON Schema form.
    pub fn to_json_schema(&self) -> Value {
        let mut props = Map::new();
        for p in &self.properties {
            let mut s = match p.schema.to_json_schema() {
                Value::Map(m) => m,
                _ => Map::new(),
            };
            if !p.description.is_empty() {
                s.insert("description", p.description.as_str().into());
            }
            props.insert(p.name.as_str(), Value::Map(s));
        }
        let required: Vec<Value> = self
            .properties
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name.as_str().into())
            .collect();
        let mut m = Map::new();
        m.insert("type", "object".into());
        m.insert("properties", Value::Map(props));
        m.insert("required", Value::Array(required));
        m.insert(
            "additionalProperties",
            Value::Bool(self.additional_properties),
        );
        Value::Map(m)
    }

    /// Checks `value`.
    ///
    /// # Errors
    /// The first [`SchemaViolation`] found.
    pub fn validate(&self, value: &Value) -> Result<(), SchemaViolation> {
        match value {
            Value::Map(_) => self.check(value, ""),
            other => Err(SchemaViolation {
                path: "/".into(),
                message: format!("expected object, got {}", kind(other)),
            }),
        }
    }

    fn check(&self, value: &Value, path: &str) -> Result<(), SchemaViolation> {
        let Value::Map(map) = value else {
            return Err(SchemaViolation {
                path: display_path(path),
                message: format!("expected object, got {}", kind(value)),
            });
        };
        for p in &self.properties {
            let sub = format!("{path}/{}", p.name);
            match map.get(&p.name) {
                Some(v) => p.schema.check(v, &sub)?,
                None if p.required => {
                    return Err(SchemaViolation {
                        path: display_path(&sub),
                        message: "required property is missing".into(),
                    });
                }
                None => {}
            }
        }
        if !self.additional_properties
            && let Some(extra) = map
                .keys()
                .find(|k| !self.properties.iter().any(|p| p.name == *k))
        {
            return Err(SchemaViolation {
                path: display_path(&format!("{path}/{extra}")),
                message: "unexpected property".into(),
            });
        }
        Ok(())
    }
}

/// Why a value does not match its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SchemaViolation {
    /// Where (`/path/to/key`, `/` for the root).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "/".into()
    } else {
        path.into()
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_integer() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Map(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> ObjectSchema {
        ObjectSchema::new()
            .required("path", Schema::String, "file")
            .optional("offset", Schema::integer_min(1), "line")
            .optional("tags", Schema::Array(Box::new(Schema::String)), "")
    }

    fn v(text: &str) -> Value {
        Value::from_json(text).unwrap()
    }

    #[test]
    fn valid_arguments_pass() {
        assert_eq!(
            schema().validate(&v(r#"{"path":"a","offset":3,"tags":["x"]}"#)),
            Ok(())
        );
    }

    #[test]
    fn missing_required_property_is_reported_with_its_path() {
        let e = schema().validate(&v(r#"{"offset":3}"#)).unwrap_err();
        assert_eq!(e.to_string(), "/path: required property is missing");
    }

    #[test]
    fn wrong_types_bounds_and_extra_keys_are_violations() {
        let s = schema();
        assert_eq!(
            s.validate(&v(r#"{"path":1}"#)).unwrap_err().to_string(),
            "/path: expected string, got integer"
        );
        assert_eq!(
            s.validate(&v(r#"{"path":"a","offset":0}"#))
                .unwrap_err()
                .to_string(),
            "/offset: must be at least 1, got 0"
        );
        assert_eq!(
            s.validate(&v(r#"{"path":"a","offset":1.5}"#))
                .unwrap_err()
                .to_string(),
            "/offset: expected integer, got number"
        );
        assert_eq!(
            s.validate(&v(r#"{"path":"a","tags":["x",2]}"#))
                .unwrap_err()
                .to_string(),
            "/tags/1: expected string, got integer"
        );
        assert_eq!(
            s.validate(&v(r#"{"path":"a","bogus":true}"#))
                .unwrap_err()
                .to_string(),
            "/bogus: unexpected property"
        );
        assert_eq!(
            s.validate(&v(r#""{\"path\":\"a\"}""#))
                .unwrap_err()
                .to_string(),
            "/: expected object, got string"
        );
    }

    #[test]
    fn json_schema_form_lists_required_properties() {
        assert_eq!(
            schema().to_json_schema().to_json(),
            r#"{"type":"object","properties":{"path":{"type":"string","description":"file"},"offset":{"type":"integer","minimum":1,"description":"line"},"tags":{"type":"array","items":{"type":"string"}}},"required":["path"],"additionalProperties":false}"#
        );
    }
}
