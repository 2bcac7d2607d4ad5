//! `Accept-Encoding` (RFC 9110 §12.5.3): whether the answer may be gzip.

use hyper::header::{self, HeaderMap};

/// Whether the request's `Accept-Encoding` allows gzip: `gzip` (or `x-gzip`) listed with a
/// non-zero `q`, or not listed and `*` with a non-zero `q`. No header, or an empty one, is
/// identity only; a `q` that is not a number refuses its coding.
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim();
            if coding.is_empty() {
                continue;
            }
            let weight = parts
                .filter_map(|p| p.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, q)| q.trim().parse::<f32>().ok());
            let allowed = weight.is_some_and(|q| q > 0.0);
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                // A refusal anywhere in the header wins over an acceptance.
                gzip = Some(gzip.unwrap_or(true) && allowed);
            } else if coding == "*" {
                any = Some(any.unwrap_or(true) && allowed);
            }
        }
    }
    gzip.or(any).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn accepts(values: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        accepts_gzip(&headers)
    }

    #[test]
    fn gzip_is_allowed_when_listed_or_covered_by_a_star_with_a_non_zero_q() {
        for yes in [
            "gzip",
            "gzip, deflate, br, zstd",
            "GZIP",
            "br;q=1.0, gzip;q=0.8, *;q=0.1",
            "gzip;q=0.001",
            "gzip ; Q=0.5",
            "x-gzip",
            "*",
            "identity, *;q=0.5",
        ] {
            assert!(accepts(&[yes]), "{yes:?}");
        }
        assert!(accepts(&["identity", "gzip"]), "across two header lines");
    }

    #[test]
    fn gzip_is_refused_when_absent_or_weighted_zero() {
        for no in [
            "",
            "identity",
            "br, deflate",
            "gzip;q=0",
            "gzip;q=0.000",
            "gzip;q=0, *",
            "*, gzip;q=0",
            "*;q=0",
            "identity;q=1, *;q=0",
            "gzip;q=nope",
        ] {
            assert!(!accepts(&[no]), "{no:?}");
        }
        assert!(!accepts(&[]), "no header");
        assert!(!accepts(&["gzip", "gzip;q=0"]), "a refusal on a later line");
    }
}
