//! Strict-object field extraction shared by the envelope parsers.

use crate::ids::{Id, ServerId};
use crate::value::Value;

/// The value is not a valid envelope. Callers attach the side ("client"/"server").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Invalid;

/// The fields of a strict object: every key must be one of `allowed`, each taken at most once.
pub(crate) struct Fields {
    slots: Vec<Option<Value>>,
    allowed: &'static [&'static str],
}

impl Fields {
    pub(crate) fn new(value: Value, allowed: &'static [&'static str]) -> Result<Self, Invalid> {
        let Value::Map(map) = value else {
            return Err(Invalid);
        };
        let mut slots: Vec<Option<Value>> = vec![None; allowed.len()];
        for (k, v) in map.into_entries() {
            let i = allowed.iter().position(|a| *a == k).ok_or(Invalid)?;
            slots[i] = Some(v);
        }
        Ok(Self { slots, allowed })
    }

    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        let i = self.allowed.iter().position(|a| *a == key)?;
        self.slots[i].take()
    }

    pub(crate) fn req(&mut self, key: &str) -> Result<Value, Invalid> {
        self.take(key).ok_or(Invalid)
    }

    pub(crate) fn id(&mut self, key: &str) -> Result<Id, Invalid> {
        match self.req(key)? {
            Value::String(s) => Id::new(s).map_err(|_| Invalid),
            _ => Err(Invalid),
        }
    }

    pub(crate) fn opt_id(&mut self, key: &str) -> Result<Option<Id>, Invalid> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Id::new(s).map(Some).map_err(|_| Invalid),
            Some(_) => Err(Invalid),
        }
    }

    pub(crate) fn string(&mut self, key: &str) -> Result<String, Invalid> {
        match self.req(key)? {
            Value::String(s) => Ok(s),
            _ => Err(Invalid),
        }
    }

    pub(crate) fn server_id(&mut self, key: &str) -> Result<ServerId, Invalid> {
        match self.req(key)? {
            Value::String(s) => ServerId::parse(&s).map_err(|_| Invalid),
            _ => Err(Invalid),
        }
    }

    /// Requires `type == expected` (the caller already dispatched on it).
    pub(crate) fn tag(&mut self) -> Result<String, Invalid> {
        self.string("type")
    }
}

/// Reads the `type` string of an envelope without consuming it.
pub(crate) fn type_of(value: &Value) -> Result<&str, Invalid> {
    value
        .as_map()
        .and_then(|m| m.get("type"))
        .and_then(Value::as_str)
        .ok_or(Invalid)
}
