//! Runtime values in their published (`docs/services.md`) shapes, and the mapping from
//! [`SessionEventKind`]s to chord ops.
//!
//! The mapping is direct, not a diff of successive states: every event already names the
//! path it changes, so streamed text becomes one `a` op per delta in O(delta) (a diff of the
//! whole state per token would cost O(state)). Only [`SessionEventKind::ItemReplaced`] — a
//! message settling or a tool finishing, a few times per turn — is diffed, and only within
//! the one item, so a settled reply does not resend its text.

use baton_protocol::chord::{Op, Path, PathSegment, diff};
use baton_protocol::{Map, Value};

use crate::models::ModelInfo;
use crate::provider::ModelRef;
use crate::session::{
    ItemBody, Phase, SessionEventKind, SessionMeta, SessionState, TranscriptItem,
};
use crate::value::{ValueError, to_protocol_value};

/// Why an event could not be turned into ops.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapError {
    /// A runtime value has no protocol form.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// The event does not fit the published state (a bug: the caller re-baselines).
    #[error("event does not fit the published state: {0}")]
    Shape(&'static str),
}

/// `provider/id`, the text form of a model in every published value.
pub(crate) fn model_text(model: &ModelRef) -> String {
    format!("{}/{}", model.provider, model.id)
}

/// Parses `provider/id` (both non-empty; the id may itself contain `/`).
pub(crate) fn parse_model(text: &str) -> Option<ModelRef> {
    let (provider, id) = text.split_once('/')?;
    (!provider.is_empty() && !id.is_empty()).then(|| ModelRef::new(provider, id))
}

/// `idle` or `turn`.
pub(crate) fn phase_text(phase: Phase) -> &'static str {
    match phase {
        Phase::Idle => "idle",
        Phase::Turn => "turn",
    }
}

/// One transcript item as published: the runtime view, plus `status: "complete"` on
/// `bashExecution` records (the runtime inserts them only once the command has finished).
pub(crate) fn item_value(item: &TranscriptItem) -> Result<Value, ValueError> {
    let mut value = to_protocol_value(item)?;
    if matches!(item.body, ItemBody::BashExecution(_))
        && let Value::Map(m) = &mut value
    {
        m.insert("status", Value::from("complete"));
    }
    Ok(value)
}

/// The `pi.session` member `state`.
///
/// # Errors
/// A transcript value the protocol cannot carry (an integer beyond ±(2^53−1)).
pub fn session_state_value(state: &SessionState) -> Result<Value, ValueError> {
    let transcript = state
        .transcript
        .iter()
        .map(item_value)
        .collect::<Result<Vec<_>, _>>()?;
    let mut m = Map::with_capacity(5);
    m.insert("phase", Value::from(phase_text(state.phase)));
    m.insert("model", Value::from(model_text(&state.model).as_str()));
    m.insert("thinkingLevel", Value::from(state.thinking_level.as_str()));
    m.insert("transcript", Value::Array(transcript));
    m.insert("queuedSteer", strings(&state.queued_steer));
    Ok(Value::Map(m))
}

/// One `pi.session-directory` entry.
pub(crate) fn meta_value(meta: &SessionMeta, phase: &str, attached: usize) -> Value {
    let mut m = Map::with_capacity(8);
    m.insert("id", Value::from(meta.id.as_str()));
    m.insert(
        "name",
        meta.name.as_deref().map_or(Value::Null, Value::from),
    );
    m.insert("cwd", Value::from(meta.cwd.as_str()));
    m.insert("createdAt", Value::from(meta.created_at.as_str()));
    m.insert("updatedAt", Value::from(meta.updated_at.as_str()));
    m.insert("phase", Value::from(phase));
    m.insert("model", Value::from(model_text(&meta.model).as_str()));
    m.insert(
        "attachedClients",
        Value::from(u32::try_from(attached).unwrap_or(u32::MAX)),
    );
    Value::Map(m)
}

/// One `pi.models` entry.
pub(crate) fn model_value(info: &ModelInfo, default: bool) -> Value {
    let mut m = Map::with_capacity(4);
    m.insert("provider", Value::from(info.provider.as_str()));
    m.insert("id", Value::from(info.id.as_str()));
    m.insert("name", Value::from(info.name.as_str()));
    m.insert("default", Value::Bool(default));
    Value::Map(m)
}

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::from(s.as_str())).collect())
}

fn key(k: &str) -> PathSegment {
    PathSegment::key(k)
}

fn index(i: usize) -> PathSegment {
    PathSegment::Index(u64::try_from(i).unwrap_or(u64::MAX))
}

fn transcript(state: &Value) -> Result<&Vec<Value>, MapError> {
    state
        .as_map()
        .and_then(|m| m.get("transcript"))
        .and_then(Value::as_array)
        .ok_or(MapError::Shape("no transcript array"))
}

/// The ops that apply `kind` to `state` (the published value before the event).
pub(crate) fn event_ops(kind: &SessionEventKind, state: &Value) -> Result<Vec<Op>, MapError> {
    let set = |k: &str, value: Value| Op::Set {
        path: vec![key(k)],
        value,
    };
    Ok(match kind {
        SessionEventKind::Phase(p) => vec![set("phase", Value::from(phase_text(*p)))],
        SessionEventKind::Model(m) => vec![set("model", Value::from(model_text(m).as_str()))],
        SessionEventKind::ThinkingLevel(t) => {
            vec![set("thinkingLevel", Value::from(t.as_str()))]
        }
        SessionEventKind::QueuedSteer(q) => vec![set("queuedSteer", strings(q))],
        SessionEventKind::ItemAdded { item } => vec![Op::Splice {
            path: vec![key("transcript")],
            index: u64::try_from(transcript(state)?.len()).unwrap_or(u64::MAX),
            remove: 0,
            items: vec![item_value(item)?],
        }],
        SessionEventKind::ItemReplaced { index: i, item } => {
            let old = transcript(state)?
                .get(*i)
                .ok_or(MapError::Shape("replaced item index out of range"))?;
            let prefix = vec![key("transcript"), index(*i)];
            diff(old, &item_value(item)?)
                .into_iter()
                .map(|op| prefixed(&prefix, op))
                .collect()
        }
        SessionEventKind::BlockAdded {
            index: i,
            content_index,
            block,
        } => vec![Op::Splice {
            path: vec![key("transcript"), index(*i), key("content")],
            index: u64::try_from(*content_index).unwrap_or(u64::MAX),
            remove: 0,
            items: vec![to_protocol_value(block)?],
        }],
        SessionEventKind::TextAppended {
            index: i,
            content_index,
            delta,
        } => append(*i, *content_index, "text", delta),
        SessionEventKind::ThinkingAppended {
            index: i,
            content_index,
            delta,
        } => append(*i, *content_index, "thinking", delta),
    })
}

fn append(item: usize, block: usize, field: &str, delta: &str) -> Vec<Op> {
    if delta.is_empty() {
        return Vec::new();
    }
    vec![Op::Append {
        path: vec![
            key("transcript"),
            index(item),
            key("content"),
            index(block),
            key(field),
        ],
        text: delta.to_owned(),
    }]
}

/// `op` (relative to a sub-value) re-rooted at `prefix` (non-empty).
fn prefixed(prefix: &Path, op: Op) -> Op {
    let join = |path: Path| -> Path { prefix.iter().cloned().chain(path).collect() };
    match op {
        Op::Replace(value) => Op::Set {
            path: prefix.clone(),
            value,
        },
        Op::Set { path, value } => Op::Set {
            path: join(path),
            value,
        },
        Op::Delete { path } => Op::Delete { path: join(path) },
        Op::Append { path, text } => Op::Append {
            path: join(path),
            text,
        },
        Op::Truncate { path, count } => Op::Truncate {
            path: join(path),
            count,
        },
        Op::Splice {
            path,
            index,
            remove,
            items,
        } => Op::Splice {
            path: join(path),
            index,
            remove,
            items,
        },
        Op::Permute { path, permutation } => Op::Permute {
            path: join(path),
            permutation,
        },
    }
}

/// Appends `op` to `ops`, merging it into the previous op when both append to the same
/// string (a batch of deltas to one block becomes one `a`).
pub(crate) fn push_coalesced(ops: &mut Vec<Op>, op: Op) {
    if let Op::Append { path, text } = &op
        && let Some(Op::Append {
            path: last_path,
            text: last_text,
        }) = ops.last_mut()
        && last_path == path
    {
        last_text.push_str(text);
        return;
    }
    ops.push(op);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantContent, TextContent};
    use crate::provider::ThinkingLevel;
    use baton_protocol::chord::apply;

    fn state() -> SessionState {
        SessionState {
            phase: Phase::Idle,
            model: ModelRef::new("scripted", "default"),
            thinking_level: ThinkingLevel::Off,
            transcript: Vec::new(),
            queued_steer: Vec::new(),
        }
    }

    fn item(json: &str) -> TranscriptItem {
        serde_json::from_str(json).unwrap()
    }

    /// Applying the mapped ops to the published value gives the published value of the
    /// reference reducer's result.
    fn check(events: &[SessionEventKind]) -> Vec<Op> {
        let mut reference = state();
        let mut value = session_state_value(&reference).unwrap();
        let mut all = Vec::new();
        for e in events {
            let ops = event_ops(e, &value).unwrap();
            apply(&mut value, &ops).unwrap();
            reference.apply(e);
            assert_eq!(
                value,
                session_state_value(&reference).unwrap(),
                "after {e:?}"
            );
            for op in ops {
                push_coalesced(&mut all, op);
            }
        }
        all
    }

    const STREAMING: &str = r#"{"id":"00000003","role":"assistant","status":"streaming","content":[],"provider":"scripted","model":"default","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0.0,"output":0.0,"cacheRead":0.0,"cacheWrite":0.0,"total":0.0}},"timestamp":5}"#;
    const SETTLED: &str = r#"{"id":"00000003","role":"assistant","status":"complete","content":[{"type":"text","text":"Hello there"}],"stopReason":"stop","provider":"scripted","model":"default","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0.0,"output":0.0,"cacheRead":0.0,"cacheWrite":0.0,"total":0.0}},"timestamp":5}"#;

    #[test]
    fn streamed_text_maps_to_appends_and_settling_does_not_resend_it() {
        let events = vec![
            SessionEventKind::Phase(Phase::Turn),
            SessionEventKind::ItemAdded {
                item: item(STREAMING),
            },
            SessionEventKind::BlockAdded {
                index: 0,
                content_index: 0,
                block: AssistantContent::Text(TextContent::new("")),
            },
            SessionEventKind::TextAppended {
                index: 0,
                content_index: 0,
                delta: "Hello ".into(),
            },
            SessionEventKind::TextAppended {
                index: 0,
                content_index: 0,
                delta: "there".into(),
            },
            SessionEventKind::ItemReplaced {
                index: 0,
                item: item(SETTLED),
            },
            SessionEventKind::Phase(Phase::Idle),
        ];
        let ops = check(&events);
        let appends: Vec<_> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Append { path, text } => Some((path.clone(), text.clone())),
                _ => None,
            })
            .collect();
        // The two deltas were coalesced into one append on the text path.
        assert_eq!(
            appends,
            vec![(
                vec![
                    key("transcript"),
                    index(0),
                    key("content"),
                    index(0),
                    key("text")
                ],
                "Hello there".to_owned()
            )]
        );
        // Settling changed status, stopReason and usage, never the text.
        for op in &ops {
            if let Op::Set { path, value } = op {
                assert!(
                    !path.contains(&key("content")),
                    "content re-sent: {path:?} = {value:?}"
                );
            }
        }
    }

    /// The ops of the last event of `events`, as JSON texts, after the others were applied.
    fn last_event_ops(events: &[SessionEventKind]) -> Vec<String> {
        let (last, before) = events.split_last().unwrap();
        let mut reference = state();
        for e in before {
            reference.apply(e);
        }
        let value = session_state_value(&reference).unwrap();
        check(events);
        event_ops(last, &value)
            .unwrap()
            .iter()
            .map(|o| o.to_value().to_json())
            .collect()
    }

    fn streamed(settled: &str) -> Vec<SessionEventKind> {
        vec![
            SessionEventKind::ItemAdded {
                item: item(STREAMING),
            },
            SessionEventKind::BlockAdded {
                index: 0,
                content_index: 0,
                block: AssistantContent::Text(TextContent::new("")),
            },
            SessionEventKind::TextAppended {
                index: 0,
                content_index: 0,
                delta: "Hello there".into(),
            },
            SessionEventKind::ItemReplaced {
                index: 0,
                item: item(settled),
            },
        ]
    }

    #[test]
    fn settling_an_assistant_item_sets_only_the_fields_that_changed() {
        // No `d` and no re-sent `provider`, `model` or `timestamp`: the settled fields are
        // new keys at the end, and `usage` changes only where its counts did.
        assert_eq!(
            last_event_ops(&streamed(SETTLED)),
            [
                r#"["s",["transcript",0,"status"],"complete"]"#,
                r#"["s",["transcript",0,"usage","input"],1]"#,
                r#"["s",["transcript",0,"usage","output"],2]"#,
                r#"["s",["transcript",0,"usage","totalTokens"],3]"#,
                r#"["s",["transcript",0,"stopReason"],"stop"]"#,
            ]
        );
        let failed = SETTLED
            .replace(r#""status":"complete""#, r#""status":"error""#)
            .replace(
                r#""stopReason":"stop""#,
                r#""stopReason":"error","errorMessage":"boom""#,
            );
        assert_eq!(
            last_event_ops(&streamed(&failed)),
            [
                r#"["s",["transcript",0,"status"],"error"]"#,
                r#"["s",["transcript",0,"usage","input"],1]"#,
                r#"["s",["transcript",0,"usage","output"],2]"#,
                r#"["s",["transcript",0,"usage","totalTokens"],3]"#,
                r#"["s",["transcript",0,"stopReason"],"error"]"#,
                r#"["s",["transcript",0,"errorMessage"],"boom"]"#,
            ]
        );
    }

    #[test]
    fn finishing_a_tool_item_sets_only_the_fields_that_changed() {
        let running = r#"{"id":"00000004","role":"tool","status":"running","toolCallId":"c1","toolName":"bash","arguments":{"command":"ls"},"content":[],"isError":false,"timestamp":6}"#;
        let finished = r#"{"id":"00000004","role":"tool","status":"complete","toolCallId":"c1","toolName":"bash","arguments":{"command":"ls"},"content":[{"type":"text","text":"a"}],"isError":false,"timestamp":6,"details":{"exitCode":0}}"#;
        let ops = last_event_ops(&[
            SessionEventKind::ItemAdded {
                item: item(running),
            },
            SessionEventKind::ItemReplaced {
                index: 0,
                item: item(finished),
            },
        ]);
        assert_eq!(
            ops,
            [
                r#"["s",["transcript",0,"status"],"complete"]"#,
                r#"["s",["transcript",0,"content"],[{"type":"text","text":"a"}]]"#,
                r#"["s",["transcript",0,"details"],{"exitCode":0}]"#,
            ]
        );
    }

    #[test]
    fn settings_and_steering_map_to_sets() {
        let ops = check(&[
            SessionEventKind::Model(ModelRef::new("openai", "m/x")),
            SessionEventKind::ThinkingLevel(ThinkingLevel::High),
            SessionEventKind::QueuedSteer(vec!["go on".into()]),
        ]);
        assert_eq!(
            ops.iter()
                .map(|o| o.to_value().to_json())
                .collect::<Vec<_>>(),
            vec![
                r#"["s",["model"],"openai/m/x"]"#,
                r#"["s",["thinkingLevel"],"high"]"#,
                r#"["s",["queuedSteer"],["go on"]]"#,
            ]
        );
    }

    #[test]
    fn bash_records_are_published_complete() {
        let bash = item(
            r#"{"id":"00000009","role":"bashExecution","command":"ls","output":"a","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}"#,
        );
        let v = item_value(&bash).unwrap();
        assert_eq!(
            v.as_map().unwrap().get("status").and_then(Value::as_str),
            Some("complete")
        );
        check(&[SessionEventKind::ItemAdded { item: bash }]);
    }

    #[test]
    fn events_that_do_not_fit_are_reported() {
        let value = session_state_value(&state()).unwrap();
        let err = event_ops(
            &SessionEventKind::ItemReplaced {
                index: 3,
                item: item(SETTLED),
            },
            &value,
        )
        .unwrap_err();
        assert!(matches!(err, MapError::Shape(_)));
    }

    #[test]
    fn model_text_round_trips() {
        let m = ModelRef::new("openai", "org/model");
        assert_eq!(parse_model(&model_text(&m)), Some(m));
        assert_eq!(parse_model("nomodel"), None);
        assert_eq!(parse_model("/x"), None);
    }
}
