//! Removing a session: `pi.session-management` `remove` (`super::server_scope`) marks it
//! ([`Residency::begin_removal`](super::residency::Residency::begin_removal)), has the server
//! let go of its handles, then [`Shared::remove`] ends what the host still holds of it and
//! deletes it.
//!
//! The mark and the gate close the race between a removal and an attach that resolved the
//! session just before the removal began:
//!
//! * an attach whose open starts after the mark gets no resident (`session_not_found`);
//! * one whose resident was installed before it has that resident taken by the removal,
//!   which retires it under its gate: an open waiting on the gate is refused
//!   (`session_not_found`); one that got the gate first completes, and the removal then ends
//!   its handle (the server releases the attachment) and closes it;
//! * the file is deleted under the gate and before the mark ends, so nothing opens the
//!   session in between, and after the mark ends there is no file to open.
//!
//! So once `remove` answers, the session is not listed, not open, holds no place under the
//! open cap, and its file is gone.

use baton_server::ServiceError;

use super::errors::service_error;
use super::residency::Removal;
use super::shared::Shared;

impl Shared {
    /// Removes the session `removal` marks, once the server let go of the handles it holds:
    /// ends the one still hosted (an attach opened it before the mark), stops its pump,
    /// closes its runtime and deletes its file, under the gate of that handle, then forgets
    /// it in the directory.
    pub(crate) async fn remove(&self, removal: &Removal<'_>) -> Result<(), ServiceError> {
        let id = removal.id();
        let resident = self.residency.take_resident(id);
        let _gate = match &resident {
            Some(resident) => Some(resident.gate.lock().await),
            None => None,
        };
        if let Some(resident) = &resident {
            resident.retire();
            // The server forgets the handle and releases its attachments.
            resident.terminated.cancel();
        }
        if let Some(live) = self.residency.forget_id(id) {
            live.stop_pump().await;
            self.directory.closed(id);
        }
        #[cfg(test)]
        self.hooks.before_delete.pass().await;
        // Closes the runtime too, if one is loaded.
        self.manager.remove(id).await.map_err(service_error)?;
        self.directory.remove(id);
        #[cfg(feature = "cluster")]
        self.release_record(id).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;
    use std::future::Future;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use baton_client::{Client, ClientConfig, Endpoint};
    use baton_protocol::chord::ServiceCall;
    use baton_protocol::{ErrorCode, ServerId, Value};
    use baton_server::{
        Context, Listener, Server, ServerConfig, ServerHost, ServiceScope, SessionHandle,
        SessionMetadata, Termination,
    };

    use crate::service::ServiceHost;
    use crate::service::test_support::{create, limits, manager};

    const HANG: Duration = Duration::from_secs(120);

    async fn guard<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(HANG, f)
            .await
            .unwrap_or_else(|_| panic!("hung: {what}"))
    }

    /// Waits for `reached` (under the hang guard) while `running` must not end first: the
    /// operation `running` stops at a point (a hook, a gate) until the test lets it go on.
    async fn before<T: Debug, U>(
        what: &str,
        running: &mut (impl Future<Output = T> + Unpin),
        reached: impl Future<Output = U>,
    ) -> U {
        guard(what, async {
            tokio::select! {
                biased;
                ended = running => panic!("{what}: ended without stopping: {ended:?}"),
                reached = reached => reached,
            }
        })
        .await
    }

    /// A host over `sessions` created sessions with at most `max_open` open, no idle
    /// timeout, served on a Unix socket.
    struct Harness {
        host: ServiceHost,
        server: Server<ServiceHost>,
        socket: PathBuf,
        ids: Vec<String>,
        _dir: tempfile::TempDir,
    }

    impl Harness {
        async fn start(sessions: usize, max_open: usize) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let manager = manager(dir.path());
            let ids = create(&manager, sessions);
            let host = ServiceHost::with_limits(Arc::new(manager), limits(max_open)).unwrap();
            let server = Server::start(
                ServerConfig::new(ServerId::parse("00000000-0000-4000-8000-0000000dead1").unwrap()),
                host.clone(),
                vec![Listener::unix(dir.path().join("run"))],
            )
            .await
            .unwrap();
            let socket = server.local_addrs()[0].unix_path().unwrap().to_path_buf();
            Self {
                host,
                server,
                socket,
                ids,
                _dir: dir,
            }
        }

        async fn client(&self) -> Client {
            let config = ClientConfig::new(Endpoint::Unix(self.socket.clone()));
            guard("connect", Client::connect(config)).await.unwrap()
        }

        fn file(&self, id: &str) -> PathBuf {
            self.host
                .manager()
                .sessions_dir()
                .join(format!("{id}.jsonl"))
        }

        fn listed(&self, id: &str) -> bool {
            self.host
                .directory()
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e.as_map().and_then(|m| m.get("id")).and_then(Value::as_str) == Some(id))
        }

        async fn stop(self) {
            self.host.begin_shutdown();
            guard("server close", self.server.close()).await.unwrap();
            guard("host shutdown", self.host.shutdown()).await;
        }
    }

    fn remove_call(id: &str) -> Value {
        ServiceCall::new("pi.session-management", "remove", vec![Value::from(id)]).into_value()
    }

    #[tokio::test]
    async fn an_attach_that_resolved_before_a_removal_cannot_reopen_the_session_while_it_goes() {
        let h = Harness::start(2, 1).await;
        let (a, b) = (&h.ids[0], &h.ids[1]);
        let client = h.client().await;
        guard("attach a", client.attach(a)).await.unwrap();
        assert!(h.host.is_open(a));

        // The racing attach: the server resolved `a` before the removal began, and opens it
        // next (what its router does, split in two here).
        let key = h
            .host
            .resolve_session(a, Context::background())
            .await
            .unwrap();
        let (at_delete, resume) = h.host.shared.hooks.before_delete.pause();
        let remove = client.request(client.server_target(), remove_call(a));
        tokio::pin!(remove);
        before("the removal reaches its file", &mut remove, at_delete)
            .await
            .unwrap();

        // The host let go of `a` and its file is not deleted yet: the attach opens it now.
        let host = h.host.clone();
        let racing = async move {
            let handle = host.open_session(key, Context::background()).await?;
            let lease = handle.lease(Context::background()).await?;
            Ok::<_, baton_server::ServiceError>((handle, lease))
        };
        tokio::pin!(racing);
        // However far it gets without the removal moving on.
        let early = tokio::select! {
            biased;
            opened = &mut racing => Some(opened),
            () = tokio::task::yield_now() => None,
        };
        resume.send(()).unwrap();
        guard("remove", &mut remove).await.unwrap();
        let opened = match early {
            Some(opened) => opened,
            None => guard("the racing attach", racing).await,
        };

        // Once `remove` answered, the session is gone everywhere.
        assert!(!h.listed(a), "the removed session is listed");
        assert!(!h.file(a).exists(), "the removed session's file is left");
        assert!(!h.host.is_open(a), "the removed session is open");
        assert!(
            !h.host.manager().is_open(a),
            "the removed session's runtime is loaded"
        );
        assert_eq!(
            h.host.open_sessions(),
            0,
            "a place under the open cap is held"
        );
        match opened {
            Ok(_) => panic!("the racing attach reopened the session being removed"),
            Err(e) => assert!(e.to_wire().is(ErrorCode::SessionNotFound), "{e}"),
        }
        // The cap (1) has its place back.
        guard("attach b", client.attach(b)).await.unwrap();
        assert!(h.host.is_open(b));
        h.stop().await;
    }

    #[tokio::test]
    async fn a_removal_waits_for_an_open_under_way_and_then_ends_it() {
        let h = Harness::start(2, 1).await;
        let (a, b) = (&h.ids[0], &h.ids[1]);
        let client = h.client().await;
        let shared = &h.host.shared;

        // An open of a under way when the removal begins: past its handle's checks, holding
        // its gate, about to read the file.
        let key = h
            .host
            .resolve_session(a, Context::background())
            .await
            .unwrap();
        let (at_load, load) = shared.hooks.before_load.pause();
        let host = h.host.clone();
        let open = async move { host.open_session(key, Context::background()).await };
        tokio::pin!(open);
        before("the open reaches the file", &mut open, at_load)
            .await
            .unwrap();

        // The removal takes the open's handle; it may go no further than its gate while the
        // open holds it, and stops before it deletes the file if it gets there.
        let (at_delete, delete) = shared.hooks.before_delete.pause();
        let remove = client.request(client.server_target(), remove_call(a));
        tokio::pin!(remove);
        before("the removal takes the handle", &mut remove, async {
            while shared.residency.resident(a).is_some() {
                tokio::task::yield_now().await;
            }
        })
        .await;

        // The open goes on while the file is still there, and completes.
        load.send(()).unwrap();
        let handle = before("the open", &mut remove, &mut open).await.unwrap();
        before("the removal reaches the file", &mut remove, at_delete)
            .await
            .unwrap();
        assert!(
            !h.host.is_open(a),
            "the removal let go of the session before the open it raced was done"
        );
        delete.send(()).unwrap();
        guard("remove", &mut remove).await.unwrap();

        // The open came first and got its handle; the removal ended it, and the lease the
        // attach asks for next is refused.
        assert!(matches!(
            guard("terminated", handle.terminated()).await,
            Termination::Closed
        ));
        let refused = handle.lease(Context::background()).await.unwrap_err();
        assert!(
            refused.to_wire().is(ErrorCode::SessionNotFound),
            "{refused}"
        );
        assert!(!h.listed(a) && !h.file(a).exists() && !h.host.is_open(a));
        assert!(!h.host.manager().is_open(a));
        assert_eq!(
            h.host.open_sessions(),
            0,
            "a place under the open cap is held"
        );
        guard("attach b", client.attach(b)).await.unwrap();
        h.stop().await;
    }

    #[tokio::test]
    async fn a_handle_opened_before_a_removal_began_is_ended_by_it() {
        let h = Harness::start(2, 1).await;
        let (a, b) = (&h.ids[0], &h.ids[1]);
        let client = h.client().await;
        // An attach that completed before the removal: the server holds its handle and lease
        // (not in its router's cache yet, as while the attach finishes).
        let key = h
            .host
            .resolve_session(a, Context::background())
            .await
            .unwrap();
        let handle = h
            .host
            .open_session(key, Context::background())
            .await
            .unwrap();
        let lease = handle.lease(Context::background()).await.unwrap();
        assert!(h.host.is_open(a));

        guard(
            "remove",
            client.request(client.server_target(), remove_call(a)),
        )
        .await
        .unwrap();
        assert!(matches!(
            guard("terminated", handle.terminated()).await,
            Termination::Closed
        ));
        lease.release(Context::background()).await.unwrap();
        let refused = handle.lease(Context::background()).await.unwrap_err();
        assert!(
            refused.to_wire().is(ErrorCode::SessionNotFound),
            "{refused}"
        );
        assert!(!h.listed(a) && !h.file(a).exists() && !h.host.is_open(a));
        assert!(!h.host.manager().is_open(a));
        assert_eq!(h.host.open_sessions(), 0);
        guard("attach b", client.attach(b)).await.unwrap();
        h.stop().await;
    }

    #[tokio::test]
    async fn a_removal_that_fails_leaves_the_session_resolvable() {
        let h = Harness::start(1, 1).await;
        let a = &h.ids[0];
        let client = h.client().await;
        // The file went behind the host's back: the manager cannot delete it.
        std::fs::remove_file(h.file(a)).unwrap();
        let refused = guard(
            "remove",
            client.request(client.server_target(), remove_call(a)),
        )
        .await
        .unwrap_err();
        assert!(refused.is(ErrorCode::SessionNotFound), "{refused}");
        assert!(h.listed(a), "listed until a removal succeeds");
        assert_eq!(
            h.host
                .resolve_session(a, Context::background())
                .await
                .unwrap()
                .session_id(),
            a
        );
        h.stop().await;
    }
}
