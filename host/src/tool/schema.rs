//! A small JSON-schema subset for tool parameters: enough to validate what models send and to
//! declare the tools to providers as JSON Schema.
//!
//! Supported: `string`, `integer` (optional bounds), `number`, `boolean`, `array` of one item
//! schema, and `object` with named properties (required or optional) and a policy for extra
//! properties. Validation reports the first violation with a JSON-pointer-like path.
//!
//! # Coercion
//!
//! [`ObjectSchema::parse`] (what the agent loop runs on a tool call) coerces the arguments
//! before it validates them, as upstream does: pi-ai 1.6.0 `validateToolArguments`
//! (`utils/validation.ts`) runs pi-schema's `compile(schema, { coerce: true }).parse()` on a
//! copy of the call's arguments, and the tool gets the coerced copy while the transcript keeps
//! what the model sent. pi-schema (`coerce.ts`, `Coercer.coerce`) is not Ajv's `coerceTypes`
//! table but three passes, of which these are the rules for this subset:
//!
//! 1. **Optional nulls.** A `null` in a declared, optional property is dropped, as if omitted
//!    (every schema here rejects `null`). A required or undeclared property's `null` stays.
//! 2. **Conversion** (TypeBox 1.3.27 `Value.Convert`, keyed on the schema's `type`):
//!    * `string` ← a boolean (`"true"`/`"false"`), a number (JavaScript's `String(n)`: `1.5`,
//!      `1e+21`, `1e-7`, `0` for `-0`), `null` (`"null"`);
//!    * `number` ← a boolean (1/0), `null` (0), a string JavaScript's `+s` reads as a finite
//!      number (surrounding whitespace trimmed, `""` is 0, `1e3`, `.5`, `0x1f`, `0o17`,
//!      `0b11`), else `"true"`/`"false"` in any case (1/0), else `<digits>n` (a BigInt);
//!    * `integer` ← whatever `number` takes, and any number, truncated towards zero (`"3.7"` and
//!      `3.7` become 3; `-0` becomes 0);
//!    * `boolean` ← 0/1, `null` (false), `"true"`/`"false"` in any case, `"1"`/`"0"`;
//!    * `array` ← its items converted; any other value (even `null` or an object) becomes a
//!      one-item array of that value converted by the item schema;
//!    * `object` ← its declared properties converted; other keys are kept as they are.
//!
//!    Anything else is left as it is for the check to report: objects and arrays for
//!    primitives, a string that is not a number for `number`/`integer`, `2` or `"yes"` for
//!    `boolean`, non-objects for `object`.
//! 3. **Primitive coercion by type** (Ajv-style `coerceTypes`): for single-type schemas like
//!    these it changes nothing pass 2 left, so it is not repeated here.
//!
//! One difference remains: baton's [`Value`] holds only safe integers (|n| ≤ 2^53 − 1), so a
//! conversion to a larger integral number (`"1e20"`) is not made and the value is reported.

use baton_protocol::{Map, Number, Value};

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

    /// `value` coerced towards this schema (the module's rules); unchanged where no rule
    /// applies.
    pub fn coerce(&self, value: &Value) -> Value {
        self.convert(&self.drop_optional_nulls(value))
    }

    /// `value` coerced, then checked: what a tool receives.
    ///
    /// # Errors
    /// The first [`SchemaViolation`] of the coerced value.
    pub fn parse(&self, value: &Value) -> Result<Value, SchemaViolation> {
        let coerced = self.coerce(value);
        self.validate(&coerced)?;
        Ok(coerced)
    }

    /// Pass 1: optional `null` properties dropped, in arrays and objects at any depth.
    fn drop_optional_nulls(&self, value: &Value) -> Value {
        match (self, value) {
            (Self::Array(items), Value::Array(values)) => Value::Array(
                values
                    .iter()
                    .map(|v| items.drop_optional_nulls(v))
                    .collect(),
            ),
            (Self::Object(o), Value::Map(map)) => Value::Map(o.drop_optional_nulls(map)),
            _ => value.clone(),
        }
    }

    /// Pass 2: TypeBox's conversions.
    fn convert(&self, value: &Value) -> Value {
        let converted = match self {
            Self::String => try_string(value).map(Value::String),
            Self::Number => match value {
                Value::Number(_) => None,
                _ => try_number(value).and_then(number_value),
            },
            Self::Integer { .. } => match value {
                Value::Number(n) if n.is_integer() => None,
                _ => try_number(value).and_then(|f| {
                    let t = f.trunc();
                    // -0 truncates to -0, an integer for JavaScript; JSON writes it 0.
                    number_value(if t == 0.0 { 0.0 } else { t })
                }),
            },
            Self::Boolean => try_boolean(value).map(Value::Bool),
            Self::Array(items) => Some(match value {
                Value::Array(values) => {
                    Value::Array(values.iter().map(|v| items.convert(v)).collect())
                }
                single => Value::Array(vec![items.convert(single)]),
            }),
            Self::Object(o) => match value {
                Value::Map(map) => Some(Value::Map(o.convert(map))),
                _ => None,
            },
        };
        converted.unwrap_or_else(|| value.clone())
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

    /// `value` coerced towards the schema (the module's rules); unchanged where no rule applies.
    pub fn coerce(&self, value: &Value) -> Value {
        match value {
            Value::Map(map) => Value::Map(self.convert(&self.drop_optional_nulls(map))),
            other => other.clone(),
        }
    }

    /// The arguments coerced, then checked: what the tool receives (the call keeps `value`).
    ///
    /// # Errors
    /// The first [`SchemaViolation`] of the coerced value.
    pub fn parse(&self, value: &Value) -> Result<Value, SchemaViolation> {
        let coerced = self.coerce(value);
        self.validate(&coerced)?;
        Ok(coerced)
    }

    fn property(&self, name: &str) -> Option<&Property> {
        self.properties.iter().find(|p| p.name == name)
    }

    fn drop_optional_nulls(&self, map: &Map) -> Map {
        let mut out = Map::with_capacity(map.len());
        for (key, v) in map.iter() {
            match self.property(key) {
                Some(p) if v.is_null() && !p.required => {}
                Some(p) => {
                    out.insert(key, p.schema.drop_optional_nulls(v));
                }
                None => {
                    out.insert(key, v.clone());
                }
            }
        }
        out
    }

    fn convert(&self, map: &Map) -> Map {
        let mut out = Map::with_capacity(map.len());
        for (key, v) in map.iter() {
            let next = match self.property(key) {
                Some(p) => p.schema.convert(v),
                None => v.clone(),
            };
            out.insert(key, next);
        }
        out
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

/// A converted number as a [`Value`]; `None` when [`Number`] cannot hold it (an unsafe
/// integer).
fn number_value(f: f64) -> Option<Value> {
    Number::from_f64(f).ok().map(Value::Number)
}

/// TypeBox's `TryString`.
fn try_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(js_number_to_string(n)),
        Value::Null => Some("null".into()),
        Value::Array(_) | Value::Map(_) => None,
    }
}

/// TypeBox's `TryNumber`: a finite number, or `None`.
fn try_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => Some(n.as_f64()),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        Value::Null => Some(0.0),
        Value::String(s) => {
            let f = js_string_to_number(s);
            if f.is_finite() {
                return Some(f);
            }
            match s.to_lowercase().as_str() {
                "false" => Some(0.0),
                "true" => Some(1.0),
                // Of TypeBox's BigInt string forms only `<digits>n` is not already a finite
                // `+s`; the others reach here only when too large to be safe.
                _ => big_int_literal(s),
            }
        }
        Value::Array(_) | Value::Map(_) => None,
    }
}

/// `-?(0|[1-9][0-9]*)n` within the safe integers, as a number.
fn big_int_literal(s: &str) -> Option<f64> {
    let digits = s.strip_suffix('n')?;
    let (negative, digits) = match digits.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, digits),
    };
    let well_formed = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !well_formed {
        return None;
    }
    let magnitude: i64 = digits.parse().ok()?;
    if magnitude > baton_protocol::MAX_SAFE_INTEGER {
        return None;
    }
    #[expect(clippy::cast_precision_loss, reason = "safe integers are exact in f64")]
    let f = magnitude as f64;
    Some(if negative { -f } else { f })
}

/// TypeBox's `TryBoolean`.
fn try_boolean(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) if n.as_f64() == 0.0 => Some(false),
        Value::Number(n) if n.as_f64() == 1.0 => Some(true),
        Value::Null => Some(false),
        Value::String(s) => match s.to_lowercase().as_str() {
            "false" | "0" => Some(false),
            "true" | "1" => Some(true),
            _ => None,
        },
        Value::Number(_) | Value::Array(_) | Value::Map(_) => None,
    }
}

/// Whitespace JavaScript's `StringToNumber` trims: `WhiteSpace` and `LineTerminator`, which is
/// Unicode `White_Space` without U+0085 plus U+FEFF.
fn is_js_whitespace(c: char) -> bool {
    c == '\u{FEFF}' || (c.is_whitespace() && c != '\u{85}')
}

/// JavaScript's `+s` (ECMAScript `StringToNumber`); NaN when `s` is not a numeric literal.
fn js_string_to_number(s: &str) -> f64 {
    let s = s.trim_matches(is_js_whitespace);
    if s.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(digits) = s
            .get(..2)
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .and_then(|_| s.get(2..))
            .filter(|d| !d.is_empty())
        {
            if !digits.chars().all(|c| c.is_digit(radix)) {
                return f64::NAN;
            }
            // More than 128 bits is far past the safe integers, which is all a Value holds.
            #[expect(
                clippy::cast_precision_loss,
                reason = "rounds to nearest, as JavaScript does"
            )]
            return u128::from_str_radix(digits, radix).map_or(f64::INFINITY, |v| v as f64);
        }
    }
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if body == "Infinity" {
        return if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
    }
    if !is_decimal_literal(body) {
        return f64::NAN;
    }
    s.parse().unwrap_or(f64::NAN)
}

/// ECMAScript's unsigned `StrDecimalLiteral` without `Infinity`: digits with an optional
/// fraction (at least one digit either side of the point) and an optional exponent.
fn is_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let int_end = digits(0);
    let mut i = int_end;
    let mut mantissa_digits = int_end;
    if i < b.len() && b[i] == b'.' {
        let frac_end = digits(i + 1);
        mantissa_digits += frac_end - (i + 1);
        i = frac_end;
    }
    if mantissa_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp_end = digits(i);
        if exp_end == i {
            return false;
        }
        i = exp_end;
    }
    i == b.len()
}

/// JavaScript's `String(n)` (ECMAScript `Number::toString`): the shortest digits that read
/// back as `n`, in exponent form from 1e21 up and below 1e-6.
fn js_number_to_string(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    let f = n.as_f64();
    if f == 0.0 {
        return "0".into();
    }
    let sign = if f < 0.0 { "-" } else { "" };
    // Rust's `{:e}` writes the shortest round-tripping digits: `d.ddde-7`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let point = exponent + 1;
    let zeros = |count: i64| "0".repeat(usize::try_from(count).unwrap_or(0));
    let body = if k <= point && point <= 21 {
        format!("{digits}{}", zeros(point - k))
    } else if 0 < point && point <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(point).unwrap_or(0));
        format!("{int}.{frac}")
    } else if -6 < point && point <= 0 {
        format!("0.{}{digits}", zeros(-point))
    } else {
        let e = point - 1;
        let e = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        match digits.split_at(1) {
            (first, "") => format!("{first}e{e}"),
            (first, rest) => format!("{first}.{rest}e{e}"),
        }
    };
    format!("{sign}{body}")
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

    /// One property `x` of `schema`, optional unless `required`.
    fn one(schema: Schema, required: bool) -> ObjectSchema {
        let o = ObjectSchema::new();
        if required {
            o.required("x", schema, "")
        } else {
            o.optional("x", schema, "")
        }
    }

    /// `{"x": <arg>}` parsed by a required `x` of `schema`, as JSON (or the violation).
    fn parsed(schema: Schema, arg: &str) -> String {
        match one(schema, true).parse(&v(&format!(r#"{{"x":{arg}}}"#))) {
            Ok(value) => value.to_json(),
            Err(e) => format!("error {e}"),
        }
    }

    #[test]
    fn a_string_parameter_takes_booleans_numbers_and_null_as_their_javascript_text() {
        assert_eq!(parsed(Schema::String, "true"), r#"{"x":"true"}"#);
        assert_eq!(parsed(Schema::String, "false"), r#"{"x":"false"}"#);
        assert_eq!(parsed(Schema::String, "42"), r#"{"x":"42"}"#);
        assert_eq!(parsed(Schema::String, "-1.5"), r#"{"x":"-1.5"}"#);
        assert_eq!(parsed(Schema::String, "0.000001"), r#"{"x":"0.000001"}"#);
        assert_eq!(parsed(Schema::String, "1.25e-7"), r#"{"x":"1.25e-7"}"#);
        assert_eq!(parsed(Schema::String, "-0.0"), r#"{"x":"0"}"#);
        assert_eq!(parsed(Schema::String, "null"), r#"{"x":"null"}"#);
        assert_eq!(parsed(Schema::String, r#""as is""#), r#"{"x":"as is"}"#);
    }

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        let text = |f: f64| js_number_to_string(&Number::from_f64(f).unwrap());
        assert_eq!(text(0.1), "0.1");
        assert_eq!(text(123.456), "123.456");
        assert_eq!(text(1e-6), "0.000001");
        assert_eq!(text(1e-7), "1e-7");
        assert_eq!(text(-2.5e-9), "-2.5e-9");
        assert_eq!(text(9007199254740991.0), "9007199254740991");
        assert_eq!(text(4503599627370495.5), "4503599627370495.5");
        assert_eq!(text(-0.0), "0");
    }

    #[test]
    fn a_number_parameter_takes_what_javascript_reads_as_a_finite_number() {
        assert_eq!(parsed(Schema::Number, r#""42""#), r#"{"x":42}"#);
        assert_eq!(parsed(Schema::Number, r#"" \t2.5\n""#), r#"{"x":2.5}"#);
        assert_eq!(parsed(Schema::Number, r#""-1e3""#), r#"{"x":-1000}"#);
        assert_eq!(parsed(Schema::Number, r#"".5""#), r#"{"x":0.5}"#);
        assert_eq!(parsed(Schema::Number, r#""5.""#), r#"{"x":5}"#);
        assert_eq!(parsed(Schema::Number, r#""+7""#), r#"{"x":7}"#);
        assert_eq!(parsed(Schema::Number, r#""0x1F""#), r#"{"x":31}"#);
        assert_eq!(parsed(Schema::Number, r#""0o17""#), r#"{"x":15}"#);
        assert_eq!(parsed(Schema::Number, r#""0B11""#), r#"{"x":3}"#);
        assert_eq!(parsed(Schema::Number, r#""""#), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::Number, r#""   ""#), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::Number, r#""\ufeff8\u00a0""#), r#"{"x":8}"#);
    }

    #[test]
    fn a_number_parameter_takes_true_false_bigint_literals_booleans_and_null() {
        assert_eq!(parsed(Schema::Number, r#""TRUE""#), r#"{"x":1}"#);
        assert_eq!(parsed(Schema::Number, r#""false""#), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::Number, r#""12n""#), r#"{"x":12}"#);
        assert_eq!(parsed(Schema::Number, r#""-12n""#), r#"{"x":-12}"#);
        assert_eq!(parsed(Schema::Number, "true"), r#"{"x":1}"#);
        assert_eq!(parsed(Schema::Number, "false"), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::Number, "null"), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::Number, "2.5"), r#"{"x":2.5}"#);
    }

    #[test]
    fn a_number_parameter_still_rejects_what_javascript_does_not_read_as_a_finite_number() {
        for arg in [
            r#""abc""#,
            r#""1_000""#,
            r#""1,5""#,
            r#""Infinity""#,
            r#""-Infinity""#,
            r#""1e400""#,
            r#""0x""#,
            r#""-0x10""#,
            r#""0x1g""#,
            r#""1e""#,
            r#""e5""#,
            r#"".""#,
            r#""012n""#,
            r#""1.5n""#,
            r#""\u0085""#,
        ] {
            assert_eq!(
                parsed(Schema::Number, arg),
                "error /x: expected number, got string",
                "{arg}"
            );
        }
        assert_eq!(
            parsed(Schema::Number, "[1]"),
            "error /x: expected number, got array"
        );
        assert_eq!(
            parsed(Schema::Number, "{}"),
            "error /x: expected number, got object"
        );
    }

    #[test]
    fn an_integer_parameter_takes_what_a_number_takes_truncated_towards_zero() {
        assert_eq!(parsed(Schema::integer(), r#""42""#), r#"{"x":42}"#);
        assert_eq!(parsed(Schema::integer(), r#""3.7""#), r#"{"x":3}"#);
        assert_eq!(parsed(Schema::integer(), "3.7"), r#"{"x":3}"#);
        assert_eq!(parsed(Schema::integer(), "-3.7"), r#"{"x":-3}"#);
        assert_eq!(parsed(Schema::integer(), r#""-0.5""#), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::integer(), "-0.0"), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::integer(), r#""0x10""#), r#"{"x":16}"#);
        assert_eq!(parsed(Schema::integer(), r#""True""#), r#"{"x":1}"#);
        assert_eq!(parsed(Schema::integer(), "true"), r#"{"x":1}"#);
        assert_eq!(parsed(Schema::integer(), "null"), r#"{"x":0}"#);
        assert_eq!(parsed(Schema::integer(), r#""""#), r#"{"x":0}"#);
    }

    #[test]
    fn an_integer_parameter_still_rejects_non_numbers_out_of_bounds_values_and_unsafe_integers() {
        assert_eq!(
            parsed(Schema::integer(), r#""one""#),
            "error /x: expected integer, got string"
        );
        assert_eq!(
            parsed(Schema::integer(), "[1]"),
            "error /x: expected integer, got array"
        );
        assert_eq!(
            parsed(Schema::integer_min(1), r#""0""#),
            "error /x: must be at least 1, got 0"
        );
        assert_eq!(
            parsed(Schema::integer_min(1), "0.9"),
            "error /x: must be at least 1, got 0"
        );
        // Upstream would take 1e20; a Value holds only safe integers.
        assert_eq!(
            parsed(Schema::integer(), r#""1e20""#),
            "error /x: expected integer, got string"
        );
    }

    #[test]
    fn a_boolean_parameter_takes_true_false_one_zero_and_null() {
        assert_eq!(parsed(Schema::Boolean, r#""true""#), r#"{"x":true}"#);
        assert_eq!(parsed(Schema::Boolean, r#""TRUE""#), r#"{"x":true}"#);
        assert_eq!(parsed(Schema::Boolean, r#""1""#), r#"{"x":true}"#);
        assert_eq!(parsed(Schema::Boolean, "1"), r#"{"x":true}"#);
        assert_eq!(parsed(Schema::Boolean, r#""False""#), r#"{"x":false}"#);
        assert_eq!(parsed(Schema::Boolean, r#""0""#), r#"{"x":false}"#);
        assert_eq!(parsed(Schema::Boolean, "0"), r#"{"x":false}"#);
        assert_eq!(parsed(Schema::Boolean, "-0.0"), r#"{"x":false}"#);
        assert_eq!(parsed(Schema::Boolean, "null"), r#"{"x":false}"#);
    }

    #[test]
    fn a_boolean_parameter_still_rejects_other_numbers_and_words() {
        for (arg, got) in [
            ("2", "integer"),
            ("0.5", "number"),
            (r#""yes""#, "string"),
            (r#"" true""#, "string"),
            (r#""""#, "string"),
            ("[true]", "array"),
        ] {
            assert_eq!(
                parsed(Schema::Boolean, arg),
                format!("error /x: expected boolean, got {got}"),
                "{arg}"
            );
        }
    }

    #[test]
    fn an_array_parameter_wraps_a_single_value_and_converts_its_items() {
        let strings = || Schema::Array(Box::new(Schema::String));
        let ints = || Schema::Array(Box::new(Schema::integer()));
        assert_eq!(parsed(strings(), r#""a""#), r#"{"x":["a"]}"#);
        assert_eq!(parsed(strings(), "5"), r#"{"x":["5"]}"#);
        assert_eq!(parsed(ints(), r#""5""#), r#"{"x":[5]}"#);
        assert_eq!(
            parsed(ints(), r#"["1",2,"3.9",true]"#),
            r#"{"x":[1,2,3,1]}"#
        );
        // A required null is wrapped and converted like any single value.
        assert_eq!(parsed(strings(), "null"), r#"{"x":["null"]}"#);
        let nested = Schema::Array(Box::new(Schema::Array(Box::new(Schema::String))));
        assert_eq!(parsed(nested, "1"), r#"{"x":[["1"]]}"#);
        assert_eq!(
            parsed(ints(), r#"["1","two"]"#),
            "error /x/1: expected integer, got string"
        );
        assert_eq!(
            parsed(strings(), "{}"),
            "error /x/0: expected string, got object"
        );
    }

    #[test]
    fn an_object_parameter_converts_its_declared_properties_and_keeps_other_keys_as_they_are() {
        let inner = ObjectSchema::new()
            .required("n", Schema::integer(), "")
            .optional("on", Schema::Boolean, "")
            .allow_additional();
        let s = one(Schema::Object(inner.clone()), true);
        assert_eq!(
            s.parse(&v(r#"{"x":{"extra":"7","n":"7","on":"true"}}"#))
                .unwrap()
                .to_json(),
            r#"{"x":{"extra":"7","n":7,"on":true}}"#
        );
        assert_eq!(
            parsed(Schema::Object(inner.clone()), r#""{\"n\":1}""#),
            "error /x: expected object, got string"
        );
        assert_eq!(
            parsed(Schema::Object(inner), "[]"),
            "error /x: expected object, got array"
        );
    }

    #[test]
    fn a_null_optional_property_is_dropped_as_if_omitted_at_any_depth() {
        assert_eq!(
            schema()
                .parse(&v(r#"{"path":"a","offset":null,"tags":null}"#))
                .unwrap()
                .to_json(),
            r#"{"path":"a"}"#
        );
        let item = ObjectSchema::new()
            .required("name", Schema::String, "")
            .optional("size", Schema::integer(), "");
        let s = one(Schema::Array(Box::new(Schema::Object(item))), true);
        assert_eq!(
            s.parse(&v(
                r#"{"x":[{"name":"a","size":null},{"name":"b","size":"2"}]}"#
            ))
            .unwrap()
            .to_json(),
            r#"{"x":[{"name":"a"},{"name":"b","size":2}]}"#
        );
    }

    #[test]
    fn a_null_required_or_undeclared_property_is_not_dropped() {
        assert_eq!(
            schema().parse(&v(r#"{"path":null}"#)).unwrap().to_json(),
            r#"{"path":"null"}"#
        );
        assert_eq!(
            schema()
                .parse(&v(r#"{"path":"a","bogus":null}"#))
                .unwrap_err()
                .to_string(),
            "/bogus: unexpected property"
        );
        let open = ObjectSchema::new().allow_additional();
        assert_eq!(
            open.parse(&v(r#"{"bogus":null}"#)).unwrap().to_json(),
            r#"{"bogus":null}"#
        );
    }

    #[test]
    fn parse_still_rejects_missing_required_properties_unexpected_keys_and_a_non_object() {
        let s = schema();
        assert_eq!(
            s.parse(&v(r#"{"offset":"3"}"#)).unwrap_err().to_string(),
            "/path: required property is missing"
        );
        assert_eq!(
            s.parse(&v(r#"{"path":"a","bogus":"1"}"#))
                .unwrap_err()
                .to_string(),
            "/bogus: unexpected property"
        );
        assert_eq!(
            s.parse(&v(r#"{"path":["a"]}"#)).unwrap_err().to_string(),
            "/path: expected string, got array"
        );
        assert_eq!(
            s.parse(&v(r#""{\"path\":\"a\"}""#))
                .unwrap_err()
                .to_string(),
            "/: expected object, got string"
        );
    }

    #[test]
    fn parse_keeps_key_order_and_leaves_valid_arguments_as_they_are() {
        let args = v(r#"{"tags":["x"],"offset":3,"path":"a"}"#);
        assert_eq!(schema().parse(&args), Ok(args.clone()));
        assert_eq!(
            schema()
                .parse(&v(r#"{"tags":"x","offset":"3","path":"a"}"#))
                .unwrap()
                .to_json(),
            r#"{"tags":["x"],"offset":3,"path":"a"}"#
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
