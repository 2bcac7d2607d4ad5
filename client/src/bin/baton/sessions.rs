//! `baton sessions`: the `pi.session-directory` list as a table. A UUID id is cut to the
//! shortest prefix no other listed id starts with (at least [`MIN_UUID_CHARS`] characters),
//! any other id is shown whole, and each phase is named so a newcomer reads it right.

use baton_protocol::Value;

use crate::live::{field, text};
use crate::table::{self, Column};

/// Fewest characters of a UUID id the table shows.
pub(crate) const MIN_UUID_CHARS: usize = 8;

/// The table's columns.
pub(crate) const COLUMNS: [Column; 6] = [
    Column::fixed("ID"),
    Column::flexible("NAME"),
    Column::fixed("PHASE"),
    Column::flexible("MODEL"),
    Column::flexible("UPDATED"),
    Column::path("CWD"),
];

/// The columns of a fleet's table: a HOST column after NAME.
pub(crate) const FLEET_COLUMNS: [Column; 7] = [
    Column::fixed("ID"),
    Column::flexible("NAME"),
    Column::flexible("HOST"),
    Column::fixed("PHASE"),
    Column::flexible("MODEL"),
    Column::flexible("UPDATED"),
    Column::path("CWD"),
];

/// The fleet's table of `rows` ([`crate::fleet::merge`]'s) within `width` characters per
/// line: HOST is the server id cut like the session ids (to what tells the listed hosts
/// apart), with `(unavailable)` for a host whose lease expired.
pub(crate) fn render_fleet(rows: &[Value], width: usize) -> String {
    let ids: Vec<String> = rows.iter().map(|r| text(field(r, "id"))).collect();
    let mut servers: Vec<String> = rows.iter().map(|r| text(field(r, "serverId"))).collect();
    servers.sort();
    servers.dedup();
    let shown_servers = shown_ids(&servers);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(shown_ids(&ids))
        .map(|(r, id)| {
            let server = text(field(r, "serverId"));
            let host = servers
                .binary_search(&server)
                .map_or(server.clone(), |i| shown_servers[i].clone());
            vec![
                id,
                text(field(r, "name")),
                crate::fleet::host_cell(&host, field(r, "live").as_bool() == Some(true)),
                phase_label(&text(field(r, "phase"))).to_owned(),
                text(field(r, "model")),
                short_time(field(r, "updatedAt")),
                text(field(r, "cwd")),
            ]
        })
        .collect();
    table::render(&FLEET_COLUMNS, &cells, width)
}

/// The table of `rows` (directory entries) within `width` characters per line.
pub(crate) fn render(rows: &[Value], width: usize) -> String {
    let ids: Vec<String> = rows.iter().map(|r| text(field(r, "id"))).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(shown_ids(&ids))
        .map(|(r, id)| {
            vec![
                id,
                text(field(r, "name")),
                phase_label(&text(field(r, "phase"))).to_owned(),
                text(field(r, "model")),
                short_time(field(r, "updatedAt")),
                text(field(r, "cwd")),
            ]
        })
        .collect();
    table::render(&COLUMNS, &cells, width)
}

/// Whether `id` is a UUID in canonical text (hyphenated, lowercase hex), of any version:
/// baton makes v4 ids, upstream pi time-ordered v7 ones, whose first digits sessions made
/// close together share. Only lowercase ids can be addressed by a prefix (`baton` lowercases
/// the prefix it is given), so any other form is shown whole.
fn is_uuid(id: &str) -> bool {
    id.len() == uuid::fmt::Hyphenated::LENGTH
        && !id.bytes().any(|b| b.is_ascii_uppercase())
        && uuid::Uuid::try_parse(id).is_ok()
}

/// Bytes `a` and `b` start with in common.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Each of `ids` as the table shows it: a UUID cut to the shortest prefix of at least
/// [`MIN_UUID_CHARS`] characters that no other of `ids` starts with (and never just before a
/// hyphen), so it addresses its session; any other id whole, since only hex prefixes resolve.
pub(crate) fn shown_ids(ids: &[String]) -> Vec<String> {
    // In sorted order an id shares its longest prefix with a neighbour.
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|&a, &b| ids[a].cmp(&ids[b]));
    let mut shared = vec![0; ids.len()];
    for pair in order.windows(2) {
        let n = common_prefix_len(&ids[pair[0]], &ids[pair[1]]);
        for &i in pair {
            shared[i] = shared[i].max(n);
        }
    }
    ids.iter()
        .zip(shared)
        .map(|(id, shared)| {
            if !is_uuid(id) {
                return id.clone();
            }
            let mut len = (shared + 1).max(MIN_UUID_CHARS).min(id.len());
            if id.as_bytes()[len - 1] == b'-' {
                len += 1;
            }
            id[..len].to_owned()
        })
        .collect()
}

/// A directory phase as the table names it. The wire's `closed` means the session exists on
/// the host but is not open (never opened yet, or closed after its idle timeout or to make
/// room): nothing ended, so it shows as `stored`. `idle` and `turn` show as they are.
pub(crate) fn phase_label(phase: &str) -> &str {
    match phase {
        "closed" => "stored",
        other => other,
    }
}

/// `2025-05-30T01:20:07.123Z` as `2025-05-30 01:20:07` (UTC); anything else as it is.
fn short_time(v: &Value) -> String {
    let t = text(v);
    match (t.get(..10), t.get(11..19)) {
        (Some(date), Some(time)) if t.as_bytes().get(10) == Some(&b'T') => format!("{date} {time}"),
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(ids: &[&str]) -> Vec<String> {
        shown_ids(&ids.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn distinct_uuids_are_cut_to_eight_characters() {
        assert_eq!(
            shown(&[
                "0a1b2c3d-0000-4000-8000-000000000001",
                "fedcba98-0000-4000-8000-000000000002",
            ]),
            ["0a1b2c3d", "fedcba98"]
        );
    }

    #[test]
    fn uuids_sharing_a_long_prefix_are_cut_just_past_where_they_differ() {
        // Time-ordered (v7) ids made in the same second share their first ten digits.
        let ids = [
            "0197a3f2-1c4e-7000-8000-000000000001",
            "0197a3f2-1c4f-7000-8000-000000000002",
            "0197a3f2-9999-7000-8000-000000000003",
            "fedcba98-0000-4000-8000-000000000004",
        ];
        assert_eq!(
            shown(&ids),
            ["0197a3f2-1c4e", "0197a3f2-1c4f", "0197a3f2-9", "fedcba98"]
        );
        for (i, cut) in shown(&ids).iter().enumerate() {
            let matching: Vec<&str> = ids
                .iter()
                .copied()
                .filter(|id| id.starts_with(cut.as_str()))
                .collect();
            assert_eq!(matching, [ids[i]], "{cut} addresses only its own id");
        }
    }

    #[test]
    fn a_cut_never_ends_just_before_a_hyphen() {
        assert_eq!(
            shown(&[
                "0a1b2c3d-0000-4000-8000-000000000001",
                "0a1b2c3d-1000-4000-8000-000000000002",
            ]),
            ["0a1b2c3d-0", "0a1b2c3d-1"]
        );
    }

    #[test]
    fn ids_that_are_not_uuids_are_shown_whole() {
        assert_eq!(
            shown(&["session-1", "session-2"]),
            ["session-1", "session-2"]
        );
        assert_eq!(
            shown(&["a-rather-long-session-name-id"]),
            ["a-rather-long-session-name-id"]
        );
        // Not canonical: uppercase (a prefix of it could not be typed), or no hyphens.
        assert_eq!(
            shown(&[
                "0A1B2C3D-0000-4000-8000-000000000001",
                "0a1b2c3d00004000800000000000000a"
            ]),
            [
                "0A1B2C3D-0000-4000-8000-000000000001",
                "0a1b2c3d00004000800000000000000a"
            ]
        );
    }

    #[test]
    fn a_uuid_is_cut_past_every_other_id_it_starts_with_in_a_mixed_list() {
        let ids = [
            "session-1",
            "0a1b2c3d",
            "0a1b2c3d-0000-4000-8000-000000000001",
            "fedcba98-0000-4000-8000-000000000002",
            "fedcba98-0000-4000-8000-000000000002-copy",
        ];
        assert_eq!(
            shown(&ids),
            [
                "session-1",
                "0a1b2c3d",
                "0a1b2c3d-0",
                "fedcba98-0000-4000-8000-000000000002",
                "fedcba98-0000-4000-8000-000000000002-copy",
            ]
        );
    }

    #[test]
    fn the_fleet_table_names_each_sessions_host_and_marks_one_not_live() {
        let rows = [
            Value::from_json(
                r#"{"id":"s-1","name":"a","serverId":"aaaaaaaa-0000-4000-8000-000000000001","live":true,"phase":"idle"}"#,
            )
            .unwrap(),
            Value::from_json(
                r#"{"id":"s-2","name":null,"serverId":"bbbbbbbb-0000-4000-8000-000000000002","live":false}"#,
            )
            .unwrap(),
        ];
        let t = render_fleet(&rows, 200);
        let lines: Vec<&str> = t.lines().map(str::trim_end).collect();
        assert!(lines[0].starts_with("ID   NAME  HOST"), "{t}");
        assert!(lines[1].contains(" aaaaaaaa "), "{t}");
        assert!(lines[2].contains(" bbbbbbbb (unavailable) "), "{t}");
    }

    #[test]
    fn a_session_on_disk_but_not_open_is_shown_as_stored_not_closed() {
        assert_eq!(phase_label("closed"), "stored");
        assert_eq!(phase_label("idle"), "idle");
        assert_eq!(phase_label("turn"), "turn");
        let row = Value::from_json(
            r#"{"id":"session-1","name":null,"phase":"closed","model":"m","updatedAt":"2026-01-02T03:04:05.678Z","cwd":"/w"}"#,
        )
        .unwrap();
        let t = render(&[row], 100);
        assert_eq!(
            t.lines().nth(1),
            Some("session-1  -     stored  m      2026-01-02 03:04:05  /w"),
            "{t}"
        );
    }
}
