//! The embedded page: gzip when the browser accepts it, plain otherwise, `Vary`, a strong
//! `ETag` per form, `If-None-Match` → 304, `Cache-Control: no-cache`.

use crate::checks::assert_secured;
use crate::support::{HttpResponse, Web};

/// Each path with the files `web/build.mjs` committed for it.
const FILES: [(&str, &[u8], &[u8]); 3] = [
    (
        "/",
        include_bytes!("../../../web/dist/index.html"),
        include_bytes!("../../../web/dist/index.html.gz"),
    ),
    (
        "/assets/app.js",
        include_bytes!("../../../web/dist/assets/app.js"),
        include_bytes!("../../../web/dist/assets/app.js.gz"),
    ),
    (
        "/assets/app.css",
        include_bytes!("../../../web/dist/assets/app.css"),
        include_bytes!("../../../web/dist/assets/app.css.gz"),
    ),
];

/// What Chrome sends.
const BROWSER: &str = "Accept-Encoding: gzip, deflate, br, zstd\r\n";

/// CRC-32 (ISO-HDLC, the one a gzip trailer carries).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `gz` is a gzip member of `plain`: its header, and its trailer's CRC-32 and length of the
/// data it inflates to.
fn assert_gzip_of(gz: &[u8], plain: &[u8], what: &str) {
    assert_eq!(&gz[..3], [0x1f, 0x8b, 8], "{what}: a deflate gzip header");
    let trailer = &gz[gz.len() - 8..];
    let crc = u32::from_le_bytes(trailer[..4].try_into().unwrap());
    let size = u32::from_le_bytes(trailer[4..].try_into().unwrap());
    assert_eq!(
        crc,
        crc32(plain),
        "{what}: the trailer's CRC-32 is the plain bytes'"
    );
    assert_eq!(size as usize, plain.len(), "{what}: the trailer's length");
    assert!(gz.len() < plain.len(), "{what}: smaller");
}

/// The page's caching headers on an answer of either form.
fn assert_revalidated(r: &HttpResponse, what: &str) {
    assert_eq!(r.header("Vary"), "Accept-Encoding", "{what}");
    assert_eq!(r.header("Cache-Control"), "no-cache", "{what}");
    let etag = r.header("ETag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "{what}: a strong ETag, got {etag:?}"
    );
    assert_secured(r, what);
}

#[tokio::test]
async fn a_browser_that_accepts_gzip_gets_the_committed_gzip_of_each_file() {
    let w = Web::start().await;
    for (path, plain, gz) in FILES {
        let r = w.get(path, BROWSER).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("Content-Encoding"), "gzip", "{path}");
        assert_eq!(r.header("Content-Length"), gz.len().to_string(), "{path}");
        assert!(r.bytes == gz, "{path}: the committed .gz");
        assert_gzip_of(&r.bytes, plain, path);
        assert_revalidated(&r, path);
    }
    // Listed anywhere, under another case or name, or covered by `*`.
    for accept in ["br;q=1.0, GZIP;q=0.5", "x-gzip", "identity;q=0.5, *"] {
        let r = w
            .get("/assets/app.js", &format!("Accept-Encoding: {accept}\r\n"))
            .await;
        assert_eq!(
            r.headers_named("Content-Encoding").collect::<Vec<_>>(),
            ["gzip"],
            "{accept:?}"
        );
        assert!(r.bytes == FILES[1].2, "{accept:?}");
    }
}

#[tokio::test]
async fn without_gzip_accepted_or_with_it_weighted_zero_the_plain_bytes_are_sent() {
    let w = Web::start().await;
    let refusals = [
        "",
        "Accept-Encoding: identity\r\n",
        "Accept-Encoding: br, deflate\r\n",
        "Accept-Encoding: gzip;q=0\r\n",
        "Accept-Encoding: gzip;q=0.000, br\r\n",
        "Accept-Encoding: *;q=0\r\n",
        "Accept-Encoding: gzip;q=0, *\r\n",
        "Accept-Encoding: gzip\r\nAccept-Encoding: gzip;q=0\r\n",
    ];
    for (path, plain, _) in FILES {
        for extra in refusals {
            let what = format!("{path} with {extra:?}");
            let r = w.get(path, extra).await;
            assert_eq!(r.status, 200, "{what}");
            assert_eq!(r.headers_named("Content-Encoding").count(), 0, "{what}");
            assert_eq!(
                r.header("Content-Length"),
                plain.len().to_string(),
                "{what}"
            );
            assert!(r.bytes == plain, "{what}: the plain bytes");
            assert_revalidated(&r, &what);
        }
    }
}

#[tokio::test]
async fn each_form_has_a_stable_strong_etag_and_if_none_match_answers_304_with_no_body() {
    let w = Web::start().await;
    let mut seen = Vec::new();
    for (path, _, _) in FILES {
        let plain = w.get(path, "").await;
        let gzip = w.get(path, BROWSER).await;
        let (plain_tag, gzip_tag) = (plain.header("ETag"), gzip.header("ETag"));
        assert_ne!(plain_tag, gzip_tag, "{path}: two representations, two tags");
        assert_eq!(w.get(path, "").await.header("ETag"), plain_tag, "{path}");
        assert_eq!(
            w.get(path, BROWSER).await.header("ETag"),
            gzip_tag,
            "{path}"
        );
        for (tag, accept) in [(plain_tag, ""), (gzip_tag, BROWSER)] {
            for if_none_match in [
                tag.to_owned(),
                format!("W/{tag}"),
                format!("\"other\", {tag}"),
                "*".to_owned(),
            ] {
                let what = format!("{path} {accept:?} If-None-Match: {if_none_match}");
                let r = w
                    .get(path, &format!("{accept}If-None-Match: {if_none_match}\r\n"))
                    .await;
                assert_eq!(r.status, 304, "{what}");
                assert!(r.bytes.is_empty(), "{what}: no body");
                assert_eq!(
                    r.headers_named("Content-Length").count(),
                    0,
                    "{what}: no length (it would have to be the file's)"
                );
                assert_eq!(r.header("ETag"), tag, "{what}");
                assert_eq!(r.headers_named("Content-Encoding").count(), 0, "{what}");
                assert_revalidated(&r, &what);
            }
        }
        // Another tag, or the other form's: the file is sent.
        let stale = w.get(path, "If-None-Match: \"stale\"\r\n").await;
        assert_eq!((stale.status, stale.bytes.len()), (200, plain.bytes.len()));
        let other_form = w
            .get(path, &format!("{BROWSER}If-None-Match: {plain_tag}\r\n"))
            .await;
        assert_eq!(
            (other_form.status, other_form.header("Content-Encoding")),
            (200, "gzip"),
            "{path}: the cached plain form does not stand for the gzip"
        );
        seen.push(plain_tag.to_owned());
    }
    seen.dedup();
    assert_eq!(seen.len(), FILES.len(), "each file its own tag: {seen:?}");
}

#[tokio::test]
async fn head_answers_with_the_get_headers_and_no_body() {
    let w = Web::start().await;
    for (path, plain, gz) in FILES {
        for (accept, len) in [("", plain.len()), (BROWSER, gz.len())] {
            let what = format!("HEAD {path} {accept:?}");
            let get = w.get(path, accept).await;
            let head = w
                .http(&format!(
                    "HEAD {path} HTTP/1.1\r\nHost: {}\r\n{accept}Connection: close\r\n\r\n",
                    w.host_header()
                ))
                .await;
            assert_eq!(head.status, 200, "{what}");
            assert!(head.bytes.is_empty(), "{what}: no body");
            assert_eq!(head.header("Content-Length"), len.to_string(), "{what}");
            assert_eq!(head.header("ETag"), get.header("ETag"), "{what}");
            assert_eq!(
                head.headers_named("Content-Encoding").collect::<Vec<_>>(),
                get.headers_named("Content-Encoding").collect::<Vec<_>>(),
                "{what}"
            );
            assert_revalidated(&head, &what);
        }
    }
}
