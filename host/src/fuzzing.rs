//! Fuzz target bodies for the host (not a stable API).
//!
//! [`jsonl_reader`] is the body of the cargo-fuzz target of the same name in
//! `fuzz/fuzz_targets/`; `host/tests/fuzz_seeds.rs` replays the committed seeds
//! (`fuzz/seeds/jsonl_reader/*`) through it on stable `cargo test`. A panic here is a bug
//! report.

use std::path::Path;

use baton_protocol::fuzzing::ValueSource;

use crate::journal::{
    EntryKind, FORMAT_VERSION, Loaded, SessionEntry, SessionHeader, active_path,
    parse as parse_file, rebuild,
};
use crate::message::{AgentMessage, UserMessage};
use crate::model_ref::ThinkingLevel;

const PATH: &str = "fuzz.jsonl";

/// Complete lines that never parse as an entry (a reader must skip them).
const GARBAGE_LINES: &[&str] = &[
    "#",
    "{",
    "not json",
    "{\"id\":\"x\"}",
    "{\"id\":\"1\",\"timestamp\":\"t\",\"type\":\"from_the_future\"}",
    "[1,2,3]",
    "\u{feff}{}",
    "{\"id\":1,\"timestamp\":\"t\",\"type\":\"session_info\",\"name\":null}",
];

/// A torn tail appended to raw inputs: the start of an entry, cut mid-write.
const TORN: &[u8] = b"{\"id\":\"000000ff\",\"parentId\":null,\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"type\":\"mess";

/// Target `jsonl_reader`: bytes as a session file through the reader behind
/// `SessionFile::open` (pure, no file system), then `rebuild` and `active_path`.
///
/// Input: byte 0 even: the rest is the file. Checks: no panic; a torn tail is counted and
/// never refuses a file; appending more torn bytes changes nothing but the torn count; every
/// complete non-empty line after the header is either an entry or a skipped line; the
/// entries re-serialise to a file that reads back equal and rebuilds the same.
///
/// Byte 0 odd: the rest drives a generator of a valid file (header, entries of every kind
/// with parents on and off the tree, unparseable complete lines in between) ending in a torn
/// prefix of one more entry. Checks: the file opens; the entries are exactly the generated
/// ones; the skipped lines and torn bytes are counted; it rebuilds exactly as the file
/// without the garbage and the tail.
pub fn jsonl_reader(data: &[u8]) {
    match data.split_first() {
        Some((mode, rest)) if mode & 1 == 0 => raw(rest),
        Some((_, rest)) => structured(rest),
        None => raw(data),
    }
}

fn parse(bytes: &[u8]) -> Option<Loaded> {
    parse_file(Path::new(PATH), bytes).ok()
}

fn raw(bytes: &[u8]) {
    let loaded = parse(bytes);
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);

    // More torn bytes change nothing but the torn count.
    let mut longer = bytes.to_vec();
    longer.extend_from_slice(TORN);
    let again = parse(&longer);
    assert_eq!(
        loaded.is_some(),
        again.is_some(),
        "a torn tail changed acceptance"
    );

    let Some(loaded) = loaded else {
        return;
    };
    let again = again.unwrap_or_else(|| unreachable!("checked above"));
    assert_eq!(loaded.torn_tail_bytes, bytes.len() - complete);
    assert_eq!(again.torn_tail_bytes, loaded.torn_tail_bytes + TORN.len());
    assert_eq!(again.header, loaded.header);
    assert_eq!(again.entries, loaded.entries);
    assert_eq!(again.skipped_lines, loaded.skipped_lines);

    let lines = bytes[..complete]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(
        lines,
        1 + loaded.entries.len() + loaded.skipped_lines.len(),
        "every line is the header, an entry or skipped"
    );

    let rebuilt = rebuild(&loaded.entries);
    for e in loaded.entries.iter().take(8) {
        let path = active_path(&loaded.entries, &e.id);
        assert!(path.len() <= loaded.entries.len());
        assert!(path.last().is_some_and(|last| last.id == e.id));
    }

    // What was read re-serialises to a file that reads back the same.
    let file = write_file(&loaded.header, &loaded.entries, &[]);
    let reread = parse(&file).expect("a re-serialised file opens");
    assert_eq!(reread.header, loaded.header);
    assert_eq!(
        reread.entries, loaded.entries,
        "entries changed on a round trip"
    );
    assert!(reread.skipped_lines.is_empty());
    assert_eq!(rebuild(&reread.entries), rebuilt);
}

fn write_file(
    header: &SessionHeader,
    entries: &[SessionEntry],
    garbage: &[(usize, &str)],
) -> Vec<u8> {
    let mut out = serde_json::to_vec(header).expect("a header serialises");
    out.push(b'\n');
    for (i, e) in entries.iter().enumerate() {
        for (_, g) in garbage.iter().filter(|(at, _)| *at == i) {
            out.extend_from_slice(g.as_bytes());
            out.push(b'\n');
        }
        out.extend(serde_json::to_vec(e).expect("an entry serialises"));
        out.push(b'\n');
    }
    for (_, g) in garbage.iter().filter(|(at, _)| *at >= entries.len()) {
        out.extend_from_slice(g.as_bytes());
        out.push(b'\n');
    }
    out
}

fn structured(data: &[u8]) {
    let mut src = ValueSource::new(data);
    let header = SessionHeader {
        kind: "session".into(),
        version: FORMAT_VERSION,
        id: "6f1c2b7e-1d2a-4c3b-8a9d-0e1f2a3b4c5d".into(),
        timestamp: "2025-05-30T01:20:00.000Z".into(),
        cwd: "/w".into(),
        owner: None,
    };
    let mut entries: Vec<SessionEntry> = Vec::new();
    let mut garbage: Vec<(usize, &str)> = Vec::new();
    let count = src.below(24);
    for i in 0..count {
        if src.below(5) == 0 {
            garbage.push((i, GARBAGE_LINES[src.below(GARBAGE_LINES.len())]));
        }
        entries.push(entry(&mut src, &entries, i));
    }
    if src.below(3) == 0 {
        garbage.push((count, GARBAGE_LINES[src.below(GARBAGE_LINES.len())]));
    }
    let clean = write_file(&header, &entries, &[]);
    let mut file = write_file(&header, &entries, &garbage);
    // The torn tail: a prefix of one more entry (never its newline).
    let next = entry(&mut src, &entries, count);
    let next = serde_json::to_vec(&next).expect("an entry serialises");
    let cut = src.below(next.len() + 1);
    file.extend_from_slice(&next[..cut]);

    let loaded = parse(&file).expect("a valid file with a torn tail opens");
    assert_eq!(loaded.header, header);
    assert_eq!(loaded.torn_tail_bytes, cut);
    assert_eq!(loaded.skipped_lines.len(), garbage.len());
    assert_eq!(
        loaded.entries, entries,
        "entries differ from what was written"
    );
    let reference = parse(&clean).expect("a valid file opens");
    assert_eq!(rebuild(&loaded.entries), rebuild(&reference.entries));
    // And the same file with the complete tail entry rebuilds with it on the end.
    let mut whole = file[..file.len() - cut].to_vec();
    whole.extend_from_slice(&next);
    whole.push(b'\n');
    let whole = parse(&whole).expect("a valid file opens");
    assert_eq!(whole.entries.len(), entries.len() + 1);
    assert_eq!(whole.entries[..entries.len()], entries[..]);
}

fn entry(src: &mut ValueSource<'_>, earlier: &[SessionEntry], i: usize) -> SessionEntry {
    let pick = |src: &mut ValueSource<'_>| -> String {
        match earlier.len() {
            0 => "00000000".into(),
            n => earlier[src.below(n)].id.clone(),
        }
    };
    let parent_id = match src.below(6) {
        0 => None,
        1 => Some("dangling".into()),
        2 if !earlier.is_empty() => Some(pick(src)),
        _ => earlier.last().map(|e| e.id.clone()),
    };
    let text = |src: &mut ValueSource<'_>| match src.value(1) {
        baton_protocol::Value::String(s) => s,
        other => other.to_json(),
    };
    let kind = match src.below(9) {
        0 | 1 => EntryKind::Message {
            message: AgentMessage::User(UserMessage::text(text(src), src.below(1000) as u64)),
        },
        2 => EntryKind::ModelChange {
            provider: text(src),
            model_id: text(src),
        },
        3 => EntryKind::ThinkingLevelChange {
            thinking_level: [
                ThinkingLevel::Off,
                ThinkingLevel::Minimal,
                ThinkingLevel::Low,
                ThinkingLevel::Medium,
                ThinkingLevel::High,
            ][src.below(5)],
        },
        4 => EntryKind::Compaction {
            summary: text(src),
            first_kept_entry_id: pick(src),
            tokens_before: src.below(100_000) as u64,
        },
        5 => EntryKind::BranchSummary {
            from_id: (src.below(4) != 0).then(|| pick(src)),
            summary: text(src),
        },
        6 => EntryKind::Label {
            target_id: pick(src),
            label: (src.below(2) == 0).then(|| text(src)),
        },
        7 => EntryKind::SessionInfo {
            name: (src.below(2) == 0).then(|| text(src)),
        },
        _ => EntryKind::Custom {
            custom_type: text(src),
            data: src.value(0),
        },
    };
    SessionEntry {
        id: if src.below(16) == 0 {
            pick(src)
        } else {
            format!("{:08x}", i + 1)
        },
        parent_id,
        timestamp: ["2025-05-30T01:20:00.000Z", "garbage", ""][src.below(3)].into(),
        kind,
    }
}
