//! Listener guarantees: Unix socket naming and mode, stale and live sockets, non-sockets,
//! plaintext TCP restricted to loopback, peer credentials reaching the host.

use std::os::unix::fs::PermissionsExt;

use baton_server::{
    ListenError, Listener, PeerIdentity, Server, StartError, TcpOptions, unix_socket_path,
};
use baton_tests::host::TestHost;
use baton_tests::server::{TestServer, config};
use baton_tests::{TempDir, guard, server_id};

#[tokio::test]
async fn unix_socket_is_named_by_server_id_with_mode_0600() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let path = s.socket_path();
    assert_eq!(path, unix_socket_path(s.dir.path(), &server_id()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    // No private bind name is left behind.
    let entries: Vec<_> = std::fs::read_dir(s.dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1);
}

/// The first `/etc/passwd` entry for `uid`.
fn passwd_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 2 && fields[2] == uid.to_string() && !fields[0].is_empty())
            .then(|| fields[0].to_owned())
    })
}

#[tokio::test]
async fn unix_peer_credentials_reach_the_host() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let _p = s.ready_peer().await;
    let peers = s.host.lock().peers.clone();
    match &peers[0] {
        Some(PeerIdentity::Unix {
            uid,
            user_name,
            pid,
            ..
        }) => {
            assert_eq!(
                *uid,
                std::fs::metadata(s.dir.path())
                    .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                    .unwrap()
            );
            assert_eq!(*pid, Some(i32::try_from(std::process::id()).unwrap()));
            // The name /etc/passwd gives the uid (none if it is not listed there).
            assert_eq!(*user_name, passwd_name(*uid));
        }
        other => panic!("expected unix credentials, got {other:?}"),
    }
}

#[tokio::test]
async fn a_non_socket_at_the_path_is_refused() {
    let dir = TempDir::new();
    let path = unix_socket_path(dir.path(), &server_id());
    std::fs::write(&path, b"precious").unwrap();
    let err = Server::start(
        config(),
        TestHost::new(&[]),
        vec![Listener::unix(dir.path())],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, StartError::Listen(ListenError::NotASocket { .. })),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[tokio::test]
async fn a_live_server_on_the_path_is_detected() {
    let first = TestServer::unix(TestHost::new(&[]), config()).await;
    let err = Server::start(
        config(),
        TestHost::new(&[]),
        vec![Listener::unix(first.dir.path())],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, StartError::Listen(ListenError::InUse { .. })),
        "{err}"
    );
    // The first server is untouched.
    let _p = first.ready_peer().await;
}

#[tokio::test]
async fn a_stale_socket_is_replaced() {
    let dir = TempDir::new();
    let path = unix_socket_path(dir.path(), &server_id());
    // A socket nobody listens on any more.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = Server::start(
        config(),
        TestHost::new(&[]),
        vec![Listener::unix(dir.path())],
    )
    .await
    .unwrap();
    let mut p = baton_tests::peer::RawPeer::unix(&path, server_id()).await;
    p.handshake().await;
    guard("close", server.close()).await.unwrap();
    assert!(!path.exists());
}

#[tokio::test]
async fn unix_directory_is_created_private() {
    let parent = TempDir::new();
    let dir = parent.path().join("run");
    let server = Server::start(config(), TestHost::new(&[]), vec![Listener::unix(&dir)])
        .await
        .unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    guard("close", server.close()).await.unwrap();
}

#[tokio::test]
async fn plaintext_tcp_on_a_non_loopback_address_needs_an_opt_in() {
    let err = Server::start(
        config(),
        TestHost::new(&[]),
        vec![Listener::tcp("0.0.0.0:0".parse().unwrap())],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            StartError::Listen(ListenError::PlaintextNotLoopback { .. })
        ),
        "{err}"
    );
}

#[tokio::test]
async fn explicit_opt_in_allows_plaintext_on_any_address() {
    let mut o = TcpOptions::new("0.0.0.0:0".parse().unwrap());
    o.allow_plaintext_non_loopback = true;
    let server = Server::start(config(), TestHost::new(&[]), vec![Listener::Tcp(o)])
        .await
        .unwrap();
    let port = server.local_addrs()[0].socket_addr().unwrap().port();
    // Reach it over loopback only.
    let mut p = baton_tests::peer::RawPeer::tcp(([127, 0, 0, 1], port).into(), server_id()).await;
    p.handshake().await;
    guard("close", server.close()).await.unwrap();
}

#[tokio::test]
async fn loopback_tcp_peer_identity_reaches_the_host() {
    let s = TestServer::tcp(TestHost::new(&[]), config()).await;
    let _p = s.ready_peer().await;
    match &s.host.lock().peers[0] {
        Some(PeerIdentity::Tcp { addr, loopback }) => {
            assert!(addr.ip().is_loopback());
            assert!(*loopback);
        }
        other => panic!("expected tcp identity, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_listener_rolls_back_the_others() {
    let dir = TempDir::new();
    let err = Server::start(
        config(),
        TestHost::new(&[]),
        vec![
            Listener::unix(dir.path()),
            Listener::tcp("0.0.0.0:0".parse().unwrap()),
        ],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StartError::Listen(_)));
    assert!(!unix_socket_path(dir.path(), &server_id()).exists());
}

#[tokio::test]
async fn a_socket_directory_others_can_write_is_refused() {
    let dir = TempDir::new();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = Server::start(
        config(),
        TestHost::new(&[]),
        vec![Listener::unix(dir.path())],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            StartError::Listen(ListenError::UnsafeDirectory { mode: 0o777, .. })
        ),
        "{err}"
    );
    assert!(!unix_socket_path(dir.path(), &server_id()).exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no private name left"
    );
}
