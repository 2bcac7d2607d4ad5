//! The page, embedded from `web/dist/` when the host is built (no Node needed to build it).

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asset {
    pub(crate) body: &'static [u8],
    pub(crate) content_type: &'static str,
}

const INDEX: Asset = Asset {
    body: include_bytes!("../../../web/dist/index.html"),
    content_type: "text/html; charset=utf-8",
};
const APP_JS: Asset = Asset {
    body: include_bytes!("../../../web/dist/assets/app.js"),
    content_type: "text/javascript; charset=utf-8",
};
const APP_CSS: Asset = Asset {
    body: include_bytes!("../../../web/dist/assets/app.css"),
    content_type: "text/css; charset=utf-8",
};

/// The file served at `path`, if any.
pub(crate) fn asset(path: &str) -> Option<Asset> {
    match path {
        "/" | "/index.html" => Some(INDEX),
        "/assets/app.js" => Some(APP_JS),
        "/assets/app.css" => Some(APP_CSS),
        _ => None,
    }
}
