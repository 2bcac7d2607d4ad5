//! The page, embedded from `web/dist/` when the host is built (no Node needed to build it):
//! each file as built and its gzip (built beside it by `web/build.mjs`), and their entity tags.

use std::fmt::Write as _;
use std::sync::LazyLock;

/// One embedded file.
#[derive(Debug)]
pub(crate) struct Asset {
    /// The file as built.
    pub(crate) body: &'static [u8],
    /// `body` gzipped.
    pub(crate) gzip: &'static [u8],
    pub(crate) content_type: &'static str,
    /// The strong entity tags of the two forms, from the SHA-256 of `body`.
    tags: LazyLock<Tags>,
}

#[derive(Debug)]
struct Tags {
    plain: String,
    gzip: String,
}

impl Asset {
    /// The strong `ETag` value of the form sent: the first 128 bits of the SHA-256 of the
    /// file as built, in hex, quoted; the gzip form's ends in `-gzip` (another representation,
    /// another tag).
    pub(crate) fn etag(&self, gzip: bool) -> &str {
        if gzip {
            &self.tags.gzip
        } else {
            &self.tags.plain
        }
    }
}

fn tags(body: &[u8]) -> Tags {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let mut hex = String::with_capacity(32);
    for b in &digest.as_ref()[..16] {
        let _ = write!(hex, "{b:02x}");
    }
    Tags {
        plain: format!("\"{hex}\""),
        gzip: format!("\"{hex}-gzip\""),
    }
}

const INDEX_HTML: &[u8] = include_bytes!("../../../web/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../../../web/dist/assets/app.js");
const APP_CSS: &[u8] = include_bytes!("../../../web/dist/assets/app.css");

static INDEX: Asset = Asset {
    body: INDEX_HTML,
    gzip: include_bytes!("../../../web/dist/index.html.gz"),
    content_type: "text/html; charset=utf-8",
    tags: LazyLock::new(|| tags(INDEX_HTML)),
};
static SCRIPT: Asset = Asset {
    body: APP_JS,
    gzip: include_bytes!("../../../web/dist/assets/app.js.gz"),
    content_type: "text/javascript; charset=utf-8",
    tags: LazyLock::new(|| tags(APP_JS)),
};
static STYLE: Asset = Asset {
    body: APP_CSS,
    gzip: include_bytes!("../../../web/dist/assets/app.css.gz"),
    content_type: "text/css; charset=utf-8",
    tags: LazyLock::new(|| tags(APP_CSS)),
};

/// The file served at `path`, if any.
pub(crate) fn asset(path: &str) -> Option<&'static Asset> {
    match path {
        "/" | "/index.html" => Some(&INDEX),
        "/assets/app.js" => Some(&SCRIPT),
        "/assets/app.css" => Some(&STYLE),
        _ => None,
    }
}

/// Whether `If-None-Match` (its values, comma-separated lists) names `etag` or is `*`; the
/// comparison is weak (RFC 9110 §13.1.2), so `W/"…"` matches too.
pub(crate) fn none_match<'a>(values: impl Iterator<Item = &'a str>, etag: &str) -> bool {
    values.flat_map(|v| v.split(',')).any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
    })
}
