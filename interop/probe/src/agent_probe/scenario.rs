//! The scenario document (shared with `interop/lib/agent-core-scenarios.mjs`), read as a
//! `baton_protocol::Value` so argument key order survives.

use std::collections::HashMap;

use baton_host::agent::ToolExecution;
use baton_host::message::{StopReason, ToolCall};
use baton_host::tool::{ObjectSchema, Schema};
use baton_protocol::{Map, Value};

/// One streamed item of a model response.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    Text(String),
    Thinking(String),
    ThinkingSignature(String),
    ToolCall(ToolCall),
}

/// How a response ends.
#[derive(Debug, Clone)]
pub(crate) enum End {
    Done(StopReason),
    Error(String),
    /// The harness aborts the run once the items are out; the stream then never ends.
    Abort,
}

/// One model response.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub items: Vec<Item>,
    pub end: End,
}

/// What a tool call does when executed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Behaviour {
    pub text: Option<String>,
    pub details: Option<Value>,
    pub is_error: bool,
    pub terminate: bool,
    pub throw: Option<String>,
    /// Waits for the abort (which the harness triggers once every such call runs), then fails
    /// with this text.
    pub abort_while_running: Option<String>,
}

/// A declared tool.
#[derive(Debug, Clone)]
pub(crate) struct ToolDecl {
    pub name: String,
    pub description: String,
    pub schema: ObjectSchema,
}

/// The whole scenario.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub prompt: String,
    pub tool_execution: ToolExecution,
    pub tools: Vec<ToolDecl>,
    pub turns: Vec<Turn>,
    pub calls: HashMap<String, Behaviour>,
    pub order: Vec<String>,
}

fn field<'a>(m: &'a Map, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

fn str_field(m: &Map, key: &str) -> Option<String> {
    field(m, key).and_then(Value::as_str).map(str::to_owned)
}

fn stop_reason(text: &str) -> Result<StopReason, String> {
    match text {
        "stop" => Ok(StopReason::Stop),
        "length" => Ok(StopReason::Length),
        "toolUse" => Ok(StopReason::ToolUse),
        other => Err(format!("unsupported stop reason {other:?}")),
    }
}

/// A JSON-schema subset → baton's [`ObjectSchema`]. An absent `additionalProperties` means
/// "allowed", as in JSON Schema.
pub(crate) fn object_schema(v: &Value) -> Result<ObjectSchema, String> {
    let m = v.as_map().ok_or("schema is not an object")?;
    let required: Vec<&str> = field(m, "required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = ObjectSchema::new();
    if let Some(props) = field(m, "properties").and_then(Value::as_map) {
        for (name, p) in props.iter() {
            let schema = value_schema(p)?;
            let description = p
                .as_map()
                .and_then(|pm| str_field(pm, "description"))
                .unwrap_or_default();
            out = if required.contains(&name) {
                out.required(name, schema, &description)
            } else {
                out.optional(name, schema, &description)
            };
        }
    }
    if field(m, "additionalProperties").and_then(Value::as_bool) != Some(false) {
        out = out.allow_additional();
    }
    Ok(out)
}

fn value_schema(v: &Value) -> Result<Schema, String> {
    let m = v.as_map().ok_or("property schema is not an object")?;
    let ty = str_field(m, "type").ok_or("property schema without a type")?;
    Ok(match ty.as_str() {
        "string" => Schema::String,
        "integer" => Schema::Integer {
            minimum: field(m, "minimum").and_then(Value::as_i64),
            maximum: field(m, "maximum").and_then(Value::as_i64),
        },
        "number" => Schema::Number,
        "boolean" => Schema::Boolean,
        "array" => Schema::Array(Box::new(value_schema(
            field(m, "items").ok_or("array schema without items")?,
        )?)),
        "object" => Schema::Object(object_schema(v)?),
        other => return Err(format!("unsupported schema type {other:?}")),
    })
}

fn item(v: &Value) -> Result<Item, String> {
    let m = v.as_map().ok_or("stream item is not an object")?;
    if let Some(t) = str_field(m, "text") {
        return Ok(Item::Text(t));
    }
    if let Some(t) = str_field(m, "thinking") {
        return Ok(Item::Thinking(t));
    }
    if let Some(t) = str_field(m, "thinkingSignature") {
        return Ok(Item::ThinkingSignature(t));
    }
    if let Some(c) = field(m, "toolCall").and_then(Value::as_map) {
        let id = str_field(c, "id").ok_or("toolCall without id")?;
        let name = str_field(c, "name").ok_or("toolCall without name")?;
        let args = field(c, "arguments")
            .cloned()
            .unwrap_or(Value::Map(Map::new()));
        return Ok(Item::ToolCall(ToolCall::new(id, name, args)));
    }
    Err(format!("unknown stream item {v}"))
}

fn turn(v: &Value) -> Result<Turn, String> {
    let m = v.as_map().ok_or("turn is not an object")?;
    let items = field(m, "items")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(item).collect::<Result<Vec<_>, _>>())
        .transpose()?
        .unwrap_or_default();
    let end = match field(m, "end").ok_or("turn without end")? {
        Value::String(s) if s == "abort" => End::Abort,
        Value::String(s) => End::Done(stop_reason(s)?),
        Value::Map(e) => End::Error(str_field(e, "error").ok_or("end object without error")?),
        other => return Err(format!("bad end {other}")),
    };
    Ok(Turn { items, end })
}

fn behaviour(v: &Value) -> Result<Behaviour, String> {
    let m = v.as_map().ok_or("call behaviour is not an object")?;
    Ok(Behaviour {
        text: str_field(m, "text"),
        details: field(m, "details").cloned(),
        is_error: field(m, "isError").and_then(Value::as_bool) == Some(true),
        terminate: field(m, "terminate").and_then(Value::as_bool) == Some(true),
        throw: str_field(m, "throw"),
        abort_while_running: str_field(m, "abortWhileRunning"),
    })
}

impl Scenario {
    /// Parses the scenario object.
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
        let m = v.as_map().ok_or("scenario is not an object")?;
        let tool_execution = match str_field(m, "toolExecution").as_deref() {
            None | Some("parallel") => ToolExecution::Parallel,
            Some("sequential") => ToolExecution::Sequential,
            Some(other) => return Err(format!("bad toolExecution {other:?}")),
        };
        let mut tools = Vec::new();
        for t in field(m, "tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let tm = t.as_map().ok_or("tool is not an object")?;
            let name = str_field(tm, "name").ok_or("tool without name")?;
            tools.push(ToolDecl {
                description: str_field(tm, "description").unwrap_or_else(|| name.clone()),
                schema: object_schema(field(tm, "parameters").ok_or("tool without parameters")?)?,
                name,
            });
        }
        let turns = field(m, "turns")
            .and_then(Value::as_array)
            .ok_or("scenario without turns")?
            .iter()
            .map(turn)
            .collect::<Result<Vec<_>, _>>()?;
        let mut calls = HashMap::new();
        if let Some(cm) = field(m, "calls").and_then(Value::as_map) {
            for (id, b) in cm.iter() {
                calls.insert(id.to_owned(), behaviour(b)?);
            }
        }
        let order = field(m, "order")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            prompt: str_field(m, "prompt").unwrap_or_default(),
            tool_execution,
            tools,
            turns,
            calls,
            order,
        })
    }
}
