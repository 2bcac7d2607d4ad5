//! Read-only accessors over a `pi.session` state (the replica's `state` member), with
//! feature detection: members a host may or may not publish (the follow-up queue, the turn
//! id, presence, compaction) are `None` when absent, so the UI offers only what the host has.

use baton_protocol::{Map, Value};

use crate::item::str_of;

/// A borrowed `pi.session` state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionState<'a> {
    map: Option<&'a Map>,
}

/// A queued follow-up prompt (the host's `followUps` member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FollowUp {
    /// The host's id for it (edits and removals name it).
    pub(crate) id: String,
    /// The prompt text.
    pub(crate) text: String,
}

/// Token and cost totals over the assistant items in the published window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Usage {
    /// Tokens of the last response (its context plus its output).
    pub(crate) context_tokens: u64,
    /// Summed cost of the responses, when the provider reports one.
    pub(crate) cost: f64,
}

impl<'a> SessionState<'a> {
    /// Views `value` (anything but a map reads as an empty state).
    pub(crate) fn new(value: &'a Value) -> Self {
        Self {
            map: value.as_map(),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(key))
    }

    fn str(&self, key: &str) -> &'a str {
        self.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// Whether a state has arrived at all (a snapshot was installed).
    pub(crate) fn is_loaded(&self) -> bool {
        self.map.is_some()
    }

    /// `idle` or `turn` (empty before the snapshot).
    pub(crate) fn phase(&self) -> &'a str {
        self.str("phase")
    }

    /// Whether a prompt is running.
    pub(crate) fn is_running(&self) -> bool {
        self.phase() == "turn"
    }

    /// `provider/id`.
    pub(crate) fn model(&self) -> &'a str {
        self.str("model")
    }

    /// The thinking level.
    pub(crate) fn thinking(&self) -> &'a str {
        self.str("thinkingLevel")
    }

    /// The transcript window.
    pub(crate) fn transcript(&self) -> &'a [Value] {
        self.get("transcript")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Steering messages not yet delivered.
    pub(crate) fn queued_steer(&self) -> Vec<&'a str> {
        self.get("queuedSteer")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The host-side follow-up queue, when the host offers one (`followUps`).
    pub(crate) fn follow_ups(&self) -> Option<Vec<FollowUp>> {
        let list = self.get("followUps")?.as_array()?;
        Some(
            list.iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(FollowUp {
                        id: String::new(),
                        text: s.clone(),
                    }),
                    Value::Map(m) => Some(FollowUp {
                        id: m
                            .get("id")
                            .map(|v| v.as_str().map_or_else(|| v.to_json(), str::to_owned))
                            .unwrap_or_default(),
                        text: str_of(m, "text").to_owned(),
                    }),
                    _ => None,
                })
                .collect(),
        )
    }

    /// The running turn's id, when the host names turns (`turnId`; null while idle).
    pub(crate) fn turn_id(&self) -> Option<&'a Value> {
        self.get("turnId").filter(|v| !v.is_null())
    }

    /// Whether the host offers `/compact` (`compaction.offered`).
    pub(crate) fn offers_compaction(&self) -> bool {
        self.get("compaction")
            .and_then(Value::as_map)
            .and_then(|m| m.get("offered"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Whether a compaction is running (`compaction.running`).
    pub(crate) fn compacting(&self) -> bool {
        self.get("compaction")
            .and_then(Value::as_map)
            .and_then(|m| m.get("running"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Who is attached, this client included, when the host publishes presence
    /// (`attached`: `[{"attachmentId", "identity"}]`).
    pub(crate) fn presence(&self) -> Option<Vec<String>> {
        let list = self.get("attached")?.as_array()?;
        Some(
            list.iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Map(m) => Some(str_of(m, "identity").to_owned()),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Tokens of the latest response and the summed cost.
    pub(crate) fn usage(&self) -> Option<Usage> {
        let mut usage = None::<Usage>;
        for item in self.transcript() {
            let Some(m) = item.as_map() else { continue };
            if str_of(m, "role") != "assistant" {
                continue;
            }
            let Some(u) = m.get("usage").and_then(Value::as_map) else {
                continue;
            };
            let total = u.get("totalTokens").and_then(Value::as_u64).unwrap_or(0);
            let cost = u
                .get("cost")
                .and_then(Value::as_map)
                .and_then(|c| c.get("total"))
                .and_then(|v| match v {
                    Value::Number(n) => Some(n.as_f64()),
                    _ => None,
                })
                .unwrap_or(0.0);
            let acc = usage.get_or_insert_with(Usage::default);
            if total > 0 {
                acc.context_tokens = total;
            }
            acc.cost += cost;
        }
        usage.filter(|u| u.context_tokens > 0 || u.cost > 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn members_a_host_does_not_publish_are_not_offered() {
        let v = state(
            r#"{"phase":"idle","model":"scripted/default","thinkingLevel":"off","transcript":[],"queuedSteer":[]}"#,
        );
        let s = SessionState::new(&v);
        assert_eq!(s.phase(), "idle");
        assert!(s.follow_ups().is_none());
        assert!(s.turn_id().is_none());
        assert!(s.presence().is_none());
        assert!(!s.offers_compaction());
        assert!(s.usage().is_none());
    }

    #[test]
    fn follow_ups_turn_id_and_presence_are_read_when_present() {
        let v = state(
            r#"{"phase":"turn","turnId":"t7","followUps":[{"id":"f1","text":"next"},"bare"],
               "attached":[{"attachmentId":1,"identity":"alice"},"bob"],"compaction":{"offered":true,"running":false}}"#,
        );
        let s = SessionState::new(&v);
        assert_eq!(s.turn_id().and_then(Value::as_str), Some("t7"));
        let f = s.follow_ups().unwrap();
        assert_eq!(f[0].id, "f1");
        assert_eq!(f[0].text, "next");
        assert_eq!(f[1].text, "bare");
        assert_eq!(s.presence().unwrap(), ["alice", "bob"]);
        assert!(s.offers_compaction());
        assert!(!s.compacting());
    }

    #[test]
    fn usage_is_the_last_responses_tokens_and_the_summed_cost() {
        let v = state(
            r#"{"transcript":[
                {"role":"assistant","usage":{"totalTokens":100,"cost":{"total":0.5}}},
                {"role":"user"},
                {"role":"assistant","usage":{"totalTokens":250,"cost":{"total":0.25}}}]}"#,
        );
        let u = SessionState::new(&v).usage().unwrap();
        assert_eq!(u.context_tokens, 250);
        assert!((u.cost - 0.75).abs() < 1e-9);
    }

    #[test]
    fn a_state_of_the_wrong_shape_reads_as_empty() {
        for json in ["null", "[1,2]", r#"{"transcript":"x","phase":3}"#] {
            let v = state(json);
            let s = SessionState::new(&v);
            assert!(s.transcript().is_empty());
            assert_eq!(s.phase(), "");
            assert!(s.follow_ups().is_none());
        }
    }
}
