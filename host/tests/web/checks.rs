//! Host, Origin and cookie checks (each wrong one → 403, nothing upgraded), the security
//! headers on every kind of answer, pairing and `/me`.

use baton_host::web::{CONTENT_SECURITY_POLICY, WebConfig, WebError, WebListener};
use baton_server::ServerConfig;
use baton_tests::host::TestHost;
use baton_tests::server_id;
use tokio_tungstenite::tungstenite;

use crate::support::{HttpResponse, Web, cookie_of, pair_request};

/// The headers every answer carries on plain http.
pub(crate) fn assert_secured(r: &HttpResponse, what: &str) {
    assert_eq!(
        r.header("Content-Security-Policy"),
        CONTENT_SECURITY_POLICY,
        "{what}"
    );
    assert_eq!(r.header("Referrer-Policy"), "no-referrer", "{what}");
    assert_eq!(r.header("X-Content-Type-Options"), "nosniff", "{what}");
    assert_eq!(
        r.headers_named("Strict-Transport-Security").count(),
        0,
        "{what}: no HSTS on plain http"
    );
}

/// Expects the upgrade to be refused with 403 and one line.
fn assert_refused(result: Result<impl std::fmt::Debug, tungstenite::Error>, why: &str) {
    match result {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403, "{why}");
            let body = String::from_utf8(response.body().clone().unwrap_or_default()).unwrap();
            assert!(body.starts_with("forbidden: "), "{why}: {body:?}");
            assert_eq!(body.lines().count(), 1, "{why}: one line, got {body:?}");
            assert_eq!(
                response.headers()["content-security-policy"],
                CONTENT_SECURITY_POLICY,
                "{why}: the refusal is secured too"
            );
        }
        other => panic!("{why}: expected a 403, got {other:?}"),
    }
}

#[tokio::test]
async fn each_wrong_host_origin_or_cookie_refuses_the_upgrade_with_403_and_nothing_upgraded() {
    let w = Web::start().await;
    w.gate.add("t1");
    let good_cookie = format!("baton_web={}", cookie_of("t1"));
    let origin = w.origin();
    let rebound = format!("evil.example:{}", w.addr().port());
    let cases: [(&str, Vec<(&str, &str)>); 7] = [
        (
            "a Host it does not answer to (DNS rebinding)",
            vec![
                ("Host", &rebound),
                ("Origin", "http://evil.example"),
                ("Cookie", &good_cookie),
            ],
        ),
        (
            "another site's Origin",
            vec![("Origin", "http://evil.example"), ("Cookie", &good_cookie)],
        ),
        (
            "the same host over another scheme",
            vec![("Origin", "https://127.0.0.1"), ("Cookie", &good_cookie)],
        ),
        ("no Origin", vec![("Cookie", &good_cookie)]),
        ("no cookie", vec![("Origin", &origin)]),
        (
            "an unknown cookie",
            vec![("Origin", &origin), ("Cookie", "baton_web=guess")],
        ),
        (
            "an empty cookie",
            vec![("Origin", &origin), ("Cookie", "baton_web=")],
        ),
    ];
    for (why, headers) in cases {
        assert_refused(w.ws(&headers).await, why);
    }
    assert_eq!(w.server.connection_count(), 0);
    assert!(
        w.host.lock().peers.is_empty(),
        "no connection reached the host"
    );
    // The same headers with all three right upgrade.
    let mut p = w.peer(&cookie_of("t1")).await;
    p.handshake().await;
}

#[tokio::test]
async fn pair_and_me_check_host_and_origin() {
    let w = Web::start().await;
    w.gate.add("t1");
    let body = r#"{"code":"code-t1"}"#;
    let host = w.host_header();
    let wrong_host = w
        .http(&pair_request(
            &format!("evil.example:{}", w.addr().port()),
            &w.origin(),
            body,
        ))
        .await;
    assert_eq!(wrong_host.status, 403);
    let port = w.addr().port();
    assert_eq!(
        wrong_host.body,
        format!(
            "forbidden: this host does not answer to \"evil.example:{port}\"; \
             start it with --web-host evil.example:{port} to allow that name\n"
        ),
        "the refusal names the Host and the fix, in one line"
    );
    let wrong_origin = w
        .http(&pair_request(&host, "http://evil.example", body))
        .await;
    assert_eq!(wrong_origin.status, 403);
    assert_eq!(
        wrong_origin.body,
        r#"{"error":"forbidden: Origin is not this page's"}"#
    );
    let no_origin = w
        .http(&format!(
            "POST /pair HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
    assert_eq!(no_origin.status, 403);
    for refused in [&wrong_host, &wrong_origin, &no_origin] {
        assert_eq!(refused.headers_named("Set-Cookie").count(), 0);
    }
    // None of them used the code.
    assert_eq!(w.pair(body).await.status, 200);

    let me_elsewhere = w
        .get(
            "/me",
            &format!(
                "Origin: http://evil.example\r\nCookie: baton_web={}\r\n",
                cookie_of("t1")
            ),
        )
        .await;
    assert_eq!(me_elsewhere.status, 403);
    let no_cookie = w.get("/me", "").await;
    assert_eq!(no_cookie.status, 401);
    assert_eq!(
        no_cookie.body,
        r#"{"error":"not paired: open a link from `baton link`"}"#
    );
    let bad_cookie = w.get("/me", "Cookie: baton_web=guess\r\n").await;
    assert_eq!(bad_cookie.status, 401);
    let me = w
        .get("/me", &format!("Cookie: baton_web={}\r\n", cookie_of("t1")))
        .await;
    assert_eq!(me.status, 200);
    assert_eq!(
        me.body,
        r#"{"role":"operator","serverId":"00000000-0000-4000-8000-000000000001","session":null,"tokenId":"t1"}"#
    );
}

#[tokio::test]
async fn pairing_sets_the_cookie_with_exactly_the_contract_attributes() {
    let w = Web::start().await;
    w.gate.add("t1");
    let r = w.pair(r#"{"code":"code-t1"}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Set-Cookie"),
        format!(
            "baton_web={}; HttpOnly; SameSite=Strict; Path=/",
            cookie_of("t1")
        )
    );
    assert_eq!(r.header("Content-Type"), "application/json");
    assert_eq!(
        r.body,
        r#"{"role":"operator","serverId":"00000000-0000-4000-8000-000000000001","session":null,"tokenId":"t1"}"#
    );
    // The gate's refusals reach the page as one line.
    let reused = w.pair(r#"{"code":"code-t1"}"#).await;
    assert_eq!(
        (reused.status, reused.body.as_str()),
        (403, r#"{"error":"unknown link"}"#)
    );
    let expired = w.pair(r#"{"code":"expired"}"#).await;
    assert_eq!(
        (expired.status, expired.body.as_str()),
        (403, r#"{"error":"this link has expired"}"#)
    );
    for r in [&reused, &expired] {
        assert_eq!(r.headers_named("Set-Cookie").count(), 0);
    }
    let not_json = w.pair("code=code-t1").await;
    assert_eq!(not_json.status, 400);
    let huge = w
        .pair(&format!(r#"{{"code":"{}"}}"#, "x".repeat(5000)))
        .await;
    assert_eq!(huge.status, 413);
}

#[tokio::test]
async fn every_kind_of_answer_carries_the_security_headers() {
    let w = Web::start().await;
    w.gate.add("t1");
    let page = w.get("/", "").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("Content-Type"), "text/html; charset=utf-8");
    assert!(page.body.contains("/assets/app.js"));
    let js = w.get("/assets/app.js", "").await;
    assert_eq!(
        (js.status, js.header("Content-Type")),
        (200, "text/javascript; charset=utf-8")
    );
    let css = w.get("/assets/app.css", "").await;
    assert_eq!(
        (css.status, css.header("Content-Type")),
        (200, "text/css; charset=utf-8")
    );
    let missing = w.get("/etc/passwd", "").await;
    assert_eq!(missing.status, 404);
    let forbidden = w
        .http("GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(forbidden.status, 403);
    let paired = w.pair(r#"{"code":"code-t1"}"#).await;
    assert_eq!(paired.status, 200);
    let refused = w.pair(r#"{"code":"nope"}"#).await;
    assert_eq!(refused.status, 403);
    let me = w.get("/me", "").await;
    assert_eq!(me.status, 401);
    let wrong_method = w
        .http(&format!(
            "DELETE /ws HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            w.host_header()
        ))
        .await;
    assert_eq!(wrong_method.status, 405);
    for (what, r) in [
        ("page", &page),
        ("script", &js),
        ("style", &css),
        ("404", &missing),
        ("403", &forbidden),
        ("pair", &paired),
        ("pair refused", &refused),
        ("me", &me),
        ("405", &wrong_method),
    ] {
        assert_secured(r, what);
    }
    for (what, r) in [("pair", &paired), ("pair refused", &refused), ("me", &me)] {
        assert_eq!(r.header("Cache-Control"), "no-store", "{what}");
    }
    // The upgrade's own answer too.
    let cookie = format!("baton_web={}", cookie_of("t1"));
    let tcp = tokio::net::TcpStream::connect(w.addr()).await.unwrap();
    let mut request = tungstenite::client::IntoClientRequest::into_client_request(format!(
        "ws://{}/ws",
        w.addr()
    ))
    .unwrap();
    request
        .headers_mut()
        .insert("Origin", w.origin().parse().unwrap());
    request
        .headers_mut()
        .insert("Cookie", cookie.parse().unwrap());
    let (_ws, upgraded) = tokio_tungstenite::client_async(request, tcp).await.unwrap();
    assert_eq!(upgraded.status(), 101);
    assert_eq!(
        upgraded.headers()["content-security-policy"],
        CONTENT_SECURITY_POLICY
    );
    assert_eq!(upgraded.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test]
async fn plain_http_off_loopback_is_refused_without_the_opt_in() {
    let server = std::sync::Arc::new(
        baton_server::Server::start(
            ServerConfig::new(server_id()),
            TestHost::new(&[]),
            vec![baton_server::Listener::tcp("127.0.0.1:0".parse().unwrap())],
        )
        .await
        .unwrap(),
    );
    let gate = std::sync::Arc::new(crate::support::FakeGate::default());
    let config = WebConfig::new("0.0.0.0:0".parse().unwrap());
    let refused = WebListener::start(config.clone(), std::sync::Arc::clone(&server), gate.clone())
        .await
        .unwrap_err();
    assert!(matches!(refused, WebError::InsecureRemote(_)), "{refused}");
    assert_eq!(
        refused.to_string(),
        "http://0.0.0.0:0: plain HTTP off loopback sends cookies in the clear; use https:// or pass --allow-insecure-remote"
    );
    let mut allowed = config;
    allowed.allow_insecure_remote = true;
    let web = WebListener::start(allowed, server, gate).await.unwrap();
    assert!(
        web.base_urls().is_empty(),
        "an unspecified address is no URL to link: {:?}",
        web.base_urls()
    );
    web.close().await;
}
