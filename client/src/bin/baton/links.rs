//! `baton link`, `baton links`, `baton unlink`: one-time links for the host's web listener
//! (`baton.links`), the browser identities they became, and revoking them. A link for no
//! session shows `(all)` as its session: the minter's own rights.

use std::time::Duration;

use baton_protocol::Value;

use crate::live::{field, text};
use crate::table::{self, Column};

/// The host's links service.
pub(crate) const SERVICE: &str = "baton.links";

/// The `links` table's columns.
const COLUMNS: [Column; 6] = [
    Column::fixed("ID"),
    Column::fixed("ROLE"),
    Column::flexible("SESSION"),
    Column::fixed("CREATED"),
    Column::fixed("LAST SEEN"),
    Column::flexible("STATE"),
];

/// A `--ttl` value: whole numbers with units, largest first, e.g. `90s`, `10m`, `1h30m`,
/// `1d`.
///
/// # Errors
/// Not a duration (one line, for clap).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 90s, 10m, 1h30m or 1d");
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut any = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(bad)?;
        any = true;
    }
    if !digits.is_empty() || !any || total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// `YYYY-MM-DD HH:MM:SS` of an ISO-8601 value, or `-` for null.
fn when(v: &Value) -> String {
    if v.is_null() {
        return "-".to_owned();
    }
    let t = text(v);
    match (t.get(..10), t.get(11..19)) {
        (Some(date), Some(time)) if t.as_bytes().get(10) == Some(&b'T') => format!("{date} {time}"),
        _ => t,
    }
}

/// The `links` table of `rows` (the `list` answer) within `width`.
pub(crate) fn render(rows: &[Value], width: usize) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let session = field(r, "session");
            let state = if field(r, "pending").as_bool() == Some(true) {
                format!("unused until {}", when(field(r, "expiresAt")))
            } else {
                "paired".to_owned()
            };
            vec![
                format!("web:{}", text(field(r, "id"))),
                text(field(r, "role")),
                if session.is_null() {
                    "(all)".to_owned()
                } else {
                    text(session)
                },
                when(field(r, "createdAt")),
                when(field(r, "lastSeenAt")),
                state,
            ]
        })
        .collect();
    table::render(&COLUMNS, &cells, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_largest_first() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "5", "m", "0s", "1x", "1.5h", "-1m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_table_marks_unused_links_and_names_browsers_web_id() {
        let rows = vec![
            Value::from_json(
                r#"{"id":"ab12cd34","role":"viewer","session":"s1","pending":true,
                   "createdAt":"2026-01-02T03:04:05.000Z","lastSeenAt":null,
                   "expiresAt":"2026-01-02T03:09:05.000Z"}"#,
            )
            .unwrap(),
            Value::from_json(
                r#"{"id":"ef56ab78","role":"admin","session":null,"pending":false,
                   "createdAt":"2026-01-02T03:04:05.000Z","lastSeenAt":"2026-01-02T04:00:00.000Z",
                   "expiresAt":null}"#,
            )
            .unwrap(),
        ];
        let t = render(&rows, 140);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(
            lines[0].starts_with("ID") && lines[0].contains("LAST SEEN"),
            "{t}"
        );
        assert!(
            lines[1].starts_with("web:ab12cd34")
                && lines[1].contains("unused until 2026-01-02 03:09:05"),
            "{t}"
        );
        assert!(
            lines[2].contains("paired") && lines[2].contains("2026-01-02 04:00:00"),
            "{t}"
        );
    }
}
