//! `baton link`, `baton links` and `baton unlink` against a real `baton-host serve`: the
//! one-line answer of a host with no web listener, exactly one URL on stdout with the code
//! in its fragment, the listing, revocation, and who may mint (a TLS client only for the
//! sessions it owns).
//!
//! Links name the host's web listener (`--listen http://127.0.0.1:0`), the base URL every
//! minted link starts with.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::Path;
use std::process::ExitStatus;

use common::state::guard;
use common::{HOST, HostProcess, baton, cli, create, run};
use tokio::process::Command;

/// A host on a Unix socket in `dir`, with `extra` flags.
async fn serve(dir: &Path, extra: &[&str]) -> HostProcess {
    let sock = format!("unix://{}", dir.join("sock").display());
    let sessions = dir.join("sessions").display().to_string();
    let mut args = vec!["--listen", &sock, "--sessions-dir", &sessions];
    args.extend_from_slice(extra);
    HostProcess::start(&args, &[]).await
}

/// The base URL the host announced for its web listener (`web listener on URL`), read past
/// its other `listening` lines.
async fn web_base(host: &mut HostProcess) -> String {
    loop {
        let line = guard("the web listener's line", host.lines.next_line())
            .await
            .unwrap()
            .expect("the host printed no web listener line");
        if let Some(base) = line.strip_prefix("web listener on ") {
            assert!(base.starts_with("http://127.0.0.1:"), "{line}");
            return base.to_owned();
        }
    }
}

/// The code in a `<base>/#pair=<code>` line.
fn code_of<'a>(url: &'a str, base: &str) -> &'a str {
    let code = url
        .strip_prefix(&format!("{base}/#pair="))
        .unwrap_or_else(|| panic!("not a link of {base}: {url:?}"));
    assert_eq!(code.len(), 32, "128 bits in hex: {code:?}");
    assert!(code.bytes().all(|b| b.is_ascii_hexdigit()), "{code:?}");
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_link_on_a_host_without_a_web_listener_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let host = serve(dir.path(), &[]).await;
    let (status, out, err) = cli(&host.url, &["link"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty(), "nothing on stdout: {out:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "this host serves no web listener; start it with --listen http://127.0.0.1:PORT"
        ),
        "{err}"
    );
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_link_prints_one_url_links_lists_it_and_unlink_revokes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = serve(dir.path(), &["--listen", "http://127.0.0.1:0"]).await;
    let base = web_base(&mut host).await;
    let url = host.url.clone();
    let id = create(&url, "alpha").await;

    // By name, read-only, ten minutes: exactly one line, the URL.
    let (status, out, err) = cli(&url, &["link", "alpha", "--viewer", "--ttl", "10m"]).await;
    assert!(status.success(), "{err}");
    assert_eq!(out.lines().count(), 1, "{out:?}");
    let first = code_of(out.trim_end(), &base).to_owned();
    // By id prefix, and without a session.
    let (status, out, err) = cli(&url, &["link", &id[..8]]).await;
    assert!(status.success(), "{err}");
    assert_ne!(
        code_of(out.trim_end(), &base),
        first,
        "every link has its own code"
    );
    let (status, out, err) = cli(&url, &["link"]).await;
    assert!(status.success(), "{err}");
    code_of(out.trim_end(), &base);

    let (status, out, err) = cli(&url, &["--json", "links"]).await;
    assert!(status.success(), "{err}");
    let list = baton_protocol::Value::from_json(out.trim()).unwrap();
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    let field = |r: &baton_protocol::Value, k: &str| r.as_map().unwrap().get(k).cloned().unwrap();
    let viewer = rows
        .iter()
        .find(|r| field(r, "role").as_str() == Some("viewer"))
        .unwrap_or_else(|| panic!("a viewer link: {out}"));
    assert_eq!(field(viewer, "session").as_str(), Some(id.as_str()));
    assert_eq!(field(viewer, "pending").as_bool(), Some(true));
    assert!(
        rows.iter()
            .any(|r| field(r, "role").as_str() == Some("admin") && field(r, "session").is_null()),
        "the host's own uid's link for no session is an admin's: {out}"
    );
    let token = field(viewer, "id").as_str().unwrap().to_owned();

    let (status, out, _) = cli(&url, &["links"]).await;
    assert!(status.success());
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "ROLE", "SESSION", "CREATED", "LAST", "SEEN", "STATE"]
    );
    assert!(out.contains(&format!("web:{token}")), "{out}");
    assert!(out.contains("unused until"), "{out}");

    let (status, out, err) = cli(&url, &["unlink", &format!("web:{token}")]).await;
    assert!(status.success(), "{err}");
    assert!(out.is_empty(), "{out:?}");
    let (_, out, _) = cli(&url, &["links"]).await;
    assert!(!out.contains(&token), "{out}");
    let (status, _, err) = cli(&url, &["unlink", &token]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("No browser identity or link {token}")),
        "{err}"
    );

    // A link longer than a day is refused by the host, in one line.
    let (status, _, err) = cli(&url, &["link", "--ttl", "2d"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("24 h") && err.lines().count() == 1, "{err}");
    assert!(host.terminate().await.success());
}

/// `baton --connect <tls> --ca … --cert <who>.pem --key <who>.key args…`.
async fn baton_as(pki: &Path, url: &str, who: &str, args: &[&str]) -> (ExitStatus, String, String) {
    let mut cmd = Command::new(baton());
    cmd.arg("--connect")
        .arg(url)
        .args(["--server-name", "localhost"])
        .arg("--ca")
        .arg(pki.join("ca.pem"))
        .arg("--cert")
        .arg(pki.join(format!("{who}.pem")))
        .arg("--key")
        .arg(pki.join(format!("{who}.key")))
        .args(args);
    run(&format!("baton as {who} {args:?}"), &mut cmd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_mints_links_only_for_the_sessions_it_owns() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let out = pki.display().to_string();
    for extra in [&["--san", "localhost"][..], &["--client", "bob"][..]] {
        let (status, _, err) = run(
            "certs",
            Command::new(HOST)
                .args(["certs", "--out", &out])
                .args(extra),
        )
        .await;
        assert!(status.success(), "{err}");
    }
    let file = |name: &str| pki.join(name).display().to_string();
    let mut host = serve(
        dir.path(),
        &[
            "--listen",
            "tls://127.0.0.1:0",
            "--tls-cert",
            &file("server.pem"),
            "--tls-key",
            &file("server.key"),
            "--client-ca",
            &file("ca.pem"),
            "--listen",
            "http://127.0.0.1:0",
        ],
    )
    .await;
    let line = guard("second listening line", host.lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let tls = line.split(' ').nth(1).unwrap().to_owned();
    assert!(tls.starts_with("tls://"), "{line}");
    let base = web_base(&mut host).await;

    // The host's own uid made this one; bob made his own.
    let theirs = create(&host.url, "theirs").await;
    let (status, out, err) = baton_as(&pki, &tls, "bob", &["create", "--name", "bobs"]).await;
    assert!(status.success(), "{err}");
    let bobs = out.trim().to_owned();

    let (status, out, err) = baton_as(&pki, &tls, "bob", &["link", &bobs]).await;
    assert!(status.success(), "{err}");
    code_of(out.trim_end(), &base);
    // Not his: he does not even see it.
    let (status, out, err) = baton_as(&pki, &tls, "bob", &["link", &theirs]).await;
    assert_ne!(status.code(), Some(0), "{err}");
    assert!(out.is_empty(), "{out:?}");
    // No session: a TLS client must name one of its own.
    let (status, _, err) = baton_as(&pki, &tls, "bob", &["link"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("only for sessions it owns"), "{err}");
    // Bob lists his own link only; the host's uid sees it too.
    let (status, out, err) = baton_as(&pki, &tls, "bob", &["--json", "links"]).await;
    assert!(status.success(), "{err}");
    assert_eq!(
        baton_protocol::Value::from_json(out.trim())
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1,
        "{out}"
    );
    let (_, own, _) = cli(&host.url, &["link", &theirs]).await;
    code_of(own.trim_end(), &base);
    let (status, out, _) = baton_as(&pki, &tls, "bob", &["--json", "links"]).await;
    assert!(status.success());
    assert_eq!(
        baton_protocol::Value::from_json(out.trim())
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1,
        "{out}"
    );
    let (_, out, _) = cli(&host.url, &["--json", "links"]).await;
    assert_eq!(
        baton_protocol::Value::from_json(out.trim())
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2,
        "{out}"
    );
    assert!(host.terminate().await.success());
}
