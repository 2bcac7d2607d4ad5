//! Paths into a replicated value, and their safety rules.
//!
//! A path is a list of segments: a string is an object key, a number an array position (or,
//! under an object, the key spelled in decimal, as JavaScript coerces `obj[3]` to `obj["3"]`).
//! `"__proto__"`, `"constructor"` and `"prototype"` are reserved: upstream applies ops to
//! plain JavaScript objects, where those segments reach the prototype chain, so every peer
//! rejects them (`unsafe path segment: <seg>`).

use std::borrow::Cow;
use std::fmt;

use crate::chord::error::{ChordError, OpError};
use crate::chord::js::{is_safe, js_string, json_string, non_negative_integer, safe_number};
use crate::value::Value;

/// Segments that would reach the JavaScript prototype chain.
pub const RESERVED_SEGMENTS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// True for a reserved key.
pub fn is_reserved(key: &str) -> bool {
    RESERVED_SEGMENTS.contains(&key)
}

/// One step of a [`Path`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathSegment {
    /// An object key (a string segment).
    Key(String),
    /// An array position, or under an object the decimal key (a number segment).
    Index(u64),
}

/// A path from the root of a value; `[]` is the root itself.
pub type Path = Vec<PathSegment>;

impl PathSegment {
    /// A key segment.
    pub fn key(key: impl Into<String>) -> Self {
        Self::Key(key.into())
    }

    /// Parses one wire segment with upstream's `assertSafePath` rule: a string that is not
    /// reserved, or an integer ≥ 0.
    ///
    /// # Errors
    /// `unsafe path segment: <String(seg)>` otherwise.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        match value {
            Value::String(s) if is_reserved(s) => Err(ChordError::UnsafePath(s.clone())),
            Value::String(s) => Ok(Self::Key(s.clone())),
            other => non_negative_integer(other)
                .map(Self::Index)
                .ok_or_else(|| ChordError::UnsafePath(js_string(other))),
        }
    }

    /// The wire segment: a string or an integer.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Key(k) => Value::from(k.as_str()),
            Self::Index(i) => safe_number(*i),
        }
    }

    /// The segment as an object property name (`3` becomes `"3"`).
    pub fn property_key(&self) -> Cow<'_, str> {
        match self {
            Self::Key(k) => Cow::Borrowed(k),
            Self::Index(i) => Cow::Owned(i.to_string()),
        }
    }

    /// The error naming this segment as unsafe.
    pub(crate) fn unsafe_error(&self) -> ChordError {
        ChordError::UnsafePath(self.to_string())
    }

    /// The typed form of the safety rule: not reserved, and an index the wire can carry.
    pub(crate) fn check_safe(&self) -> Result<(), ChordError> {
        match self {
            Self::Key(k) if is_reserved(k) => Err(self.unsafe_error()),
            Self::Index(i) if !is_safe(*i) => Err(self.unsafe_error()),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for PathSegment {
    /// JavaScript `String(seg)`: the key itself, or the decimal index.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(k) => f.write_str(k),
            Self::Index(i) => write!(f, "{i}"),
        }
    }
}

impl From<&str> for PathSegment {
    fn from(key: &str) -> Self {
        Self::Key(key.to_owned())
    }
}

impl From<String> for PathSegment {
    fn from(key: String) -> Self {
        Self::Key(key)
    }
}

impl From<u64> for PathSegment {
    fn from(index: u64) -> Self {
        Self::Index(index)
    }
}

/// Parses a wire path array, checking every segment.
///
/// # Errors
/// `path is not an array`, or `unsafe path segment: …`.
pub fn parse_path(value: &Value) -> Result<Path, ChordError> {
    let Value::Array(segments) = value else {
        return Err(OpError::PathNotArray.into());
    };
    segments.iter().map(PathSegment::parse).collect()
}

/// The wire path array.
pub fn path_to_value(path: &[PathSegment]) -> Value {
    Value::Array(path.iter().map(PathSegment::to_value).collect())
}

/// Checks a typed path against the safety rules.
pub(crate) fn check_safe_path(path: &[PathSegment]) -> Result<(), ChordError> {
    path.iter().try_for_each(PathSegment::check_safe)
}

/// `JSON.stringify(path)`, as upstream's `PathError` prints it.
pub(crate) fn path_json(path: &[PathSegment]) -> String {
    let mut out = String::from("[");
    for (i, segment) in path.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match segment {
            PathSegment::Key(k) => out.push_str(&json_string(k)),
            PathSegment::Index(n) => out.push_str(&n.to_string()),
        }
    }
    out.push(']');
    out
}

/// `unresolvable path: <JSON>` for a path.
pub(crate) fn unresolvable(path: &[PathSegment]) -> ChordError {
    ChordError::UnresolvablePath(path_json(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn reserved_segments_are_unsafe() {
        for seg in RESERVED_SEGMENTS {
            let err = parse_path(&Value::Array(vec![Value::from(seg)])).unwrap_err();
            assert_eq!(err.to_string(), format!("unsafe path segment: {seg}"));
        }
    }

    #[test]
    fn non_integer_and_negative_numbers_are_unsafe_segments() {
        assert_eq!(
            parse_path(&v("[-1]")).unwrap_err().to_string(),
            "unsafe path segment: -1"
        );
        assert_eq!(
            parse_path(&v("[1.5]")).unwrap_err().to_string(),
            "unsafe path segment: 1.5"
        );
        assert_eq!(
            parse_path(&v("[null]")).unwrap_err().to_string(),
            "unsafe path segment: null"
        );
        assert_eq!(
            parse_path(&v("[{}]")).unwrap_err().to_string(),
            "unsafe path segment: [object Object]"
        );
    }

    #[test]
    fn a_path_must_be_an_array() {
        assert_eq!(
            parse_path(&v(r#""a""#)).unwrap_err().to_string(),
            "path is not an array"
        );
    }

    #[test]
    fn paths_print_as_javascript_json() {
        let path = parse_path(&v(r#"["a\u0000b",0,"x\"y"]"#)).unwrap();
        assert_eq!(path_json(&path), r#"["a\u0000b",0,"x\"y"]"#);
        assert_eq!(path_json(&[]), "[]");
        assert_eq!(path_to_value(&path), v(r#"["a\u0000b",0,"x\"y"]"#));
    }

    #[test]
    fn string_and_number_segments_are_distinct() {
        assert_ne!(
            parse_path(&v(r#"["0"]"#)).unwrap(),
            parse_path(&v("[0]")).unwrap()
        );
    }
}
