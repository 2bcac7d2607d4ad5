//! Session addressing: a `<SESSION>` argument is an exact id, else an exact (unique) name,
//! else a unique id prefix of at least [`MIN_PREFIX_HEX`] hex digits. Resolved client-side
//! against the `pi.session-directory` list, so the host is always called with a full id.

use baton_protocol::Value;

/// Fewest hex digits an id prefix must have (fewer would match by accident).
pub(crate) const MIN_PREFIX_HEX: usize = 4;

/// One directory entry: what addressing needs (the full row stays for display).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The full session id.
    pub(crate) id: String,
    /// Its name, if it has one.
    pub(crate) name: Option<String>,
}

impl Entry {
    /// The entry of one `pi.session-directory` row (`None` without a string `id`).
    pub(crate) fn from_row(row: &Value) -> Option<Self> {
        let m = row.as_map()?;
        Some(Self {
            id: m.get("id")?.as_str()?.to_owned(),
            name: m.get("name").and_then(Value::as_str).map(str::to_owned),
        })
    }
}

/// Why an address names no single session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResolveError {
    /// Nothing matches.
    #[error("no session has the id, name or id prefix {0:?} (`baton sessions` lists them)")]
    NotFound(String),
    /// Not a name, and too short to be an id prefix.
    #[error(
        "no session is named {0:?}, and an id prefix needs at least {MIN_PREFIX_HEX} hex digits"
    )]
    TooShort(String),
    /// Several sessions match (the candidates: id and name).
    #[error("{input:?} matches {} sessions: {}; use more of the id", candidates.len(), list(candidates))]
    Ambiguous {
        /// The address as given.
        input: String,
        /// Every matching session.
        candidates: Vec<Entry>,
    },
}

fn list(candidates: &[Entry]) -> String {
    candidates
        .iter()
        .map(|e| match &e.name {
            Some(n) => format!("{} ({n})", e.id),
            None => e.id.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves `input` against `entries` to one full session id.
///
/// # Errors
/// [`ResolveError`]: no match, a too-short prefix, or several matches.
pub(crate) fn resolve<'a>(input: &str, entries: &'a [Entry]) -> Result<&'a Entry, ResolveError> {
    if let Some(e) = entries.iter().find(|e| e.id == input) {
        return Ok(e);
    }
    let named: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.name.as_deref() == Some(input))
        .collect();
    match named.as_slice() {
        [one] => return Ok(one),
        [] => {}
        many => {
            return Err(ResolveError::Ambiguous {
                input: input.to_owned(),
                candidates: many.iter().map(|e| (*e).clone()).collect(),
            });
        }
    }
    // Ids are lowercase hyphenated UUIDs: a prefix is hex digits and hyphens.
    let looks_like_id =
        !input.is_empty() && input.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !looks_like_id {
        return Err(ResolveError::NotFound(input.to_owned()));
    }
    if input.chars().filter(char::is_ascii_hexdigit).count() < MIN_PREFIX_HEX {
        return Err(ResolveError::TooShort(input.to_owned()));
    }
    let prefix = input.to_ascii_lowercase();
    let matching: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.id.starts_with(&prefix))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(ResolveError::NotFound(input.to_owned())),
        many => Err(ResolveError::Ambiguous {
            input: input.to_owned(),
            candidates: many.iter().map(|e| (*e).clone()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        let e = |id: &str, name: Option<&str>| Entry {
            id: id.to_owned(),
            name: name.map(str::to_owned),
        };
        vec![
            e("0a1b2c3d-0000-4000-8000-000000000001", Some("alpha")),
            e("0a1b9999-0000-4000-8000-000000000002", Some("beta")),
            e("fedcba98-0000-4000-8000-000000000003", Some("twin")),
            e("fedc0000-0000-4000-8000-000000000004", Some("twin")),
            // A name that looks like another session's id prefix: the name wins.
            e("77777777-0000-4000-8000-000000000005", Some("0a1b2c3d")),
            e("12345678-0000-4000-8000-000000000006", None),
        ]
    }

    #[test]
    fn an_exact_id_resolves() {
        let all = entries();
        let e = resolve("fedcba98-0000-4000-8000-000000000003", &all).unwrap();
        assert_eq!(e.name.as_deref(), Some("twin"));
    }

    #[test]
    fn a_unique_name_resolves_before_any_prefix() {
        let all = entries();
        assert_eq!(resolve("alpha", &all).unwrap().id, all[0].id);
        assert_eq!(resolve("0a1b2c3d", &all).unwrap().id, all[4].id);
    }

    #[test]
    fn a_unique_prefix_of_four_hex_digits_resolves() {
        let all = entries();
        assert_eq!(resolve("1234", &all).unwrap().id, all[5].id);
        assert_eq!(
            resolve("0A1B2", &all).unwrap().id,
            all[0].id,
            "case-insensitive"
        );
        assert_eq!(resolve("fedcba", &all).unwrap().id, all[2].id);
    }

    #[test]
    fn an_ambiguous_prefix_or_name_lists_the_candidates() {
        let all = entries();
        let Err(ResolveError::Ambiguous { candidates, .. }) = resolve("0a1b", &all) else {
            panic!("0a1b is ambiguous");
        };
        assert_eq!(candidates, all[..2]);
        let e = resolve("twin", &all).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("fedcba98-0000-4000-8000-000000000003 (twin)")
                && text.contains("fedc0000-0000-4000-8000-000000000004 (twin)"),
            "{text}"
        );
    }

    #[test]
    fn a_short_prefix_is_refused_with_the_minimum() {
        let all = entries();
        assert_eq!(
            resolve("0a1", &all),
            Err(ResolveError::TooShort("0a1".into()))
        );
        assert!(
            resolve("0a-1", &all)
                .unwrap_err()
                .to_string()
                .contains("at least 4")
        );
    }

    #[test]
    fn nothing_matching_is_not_found() {
        let all = entries();
        assert_eq!(
            resolve("nope", &all),
            Err(ResolveError::NotFound("nope".into()))
        );
        assert_eq!(
            resolve("9999", &all),
            Err(ResolveError::NotFound("9999".into()))
        );
        assert_eq!(
            resolve("", &all),
            Err(ResolveError::NotFound(String::new()))
        );
    }

    #[test]
    fn rows_without_an_id_are_skipped() {
        assert_eq!(Entry::from_row(&Value::Null), None);
    }
}
