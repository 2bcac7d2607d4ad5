//! A frame-level client for what `baton-client` hides: the exact answer to a cancelled
//! request, and calls the typed client would not build (an instance address on a singleton,
//! an `unsubscribe` of an id it never opened).

use std::collections::VecDeque;
use std::path::Path;

use baton_protocol::codec::{ServerMessageDecoder, encode_frame};
use baton_protocol::{
    Cancel, ClientMessage, Id, Outcome, Request, Response, ServerId, ServerMessage, SessionTarget,
    Target, Value,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::state::HANG;
use crate::support::call;

/// One raw connection (hello done).
pub(crate) struct RawPeer {
    io: UnixStream,
    decoder: ServerMessageDecoder,
    pending: VecDeque<ServerMessage>,
    server_id: ServerId,
    next_request: u64,
}

impl RawPeer {
    /// Connects to `socket` and exchanges hellos.
    pub(crate) async fn connect(socket: &Path, server_id: ServerId) -> Self {
        let io = UnixStream::connect(socket).await.unwrap();
        let mut peer = Self {
            io,
            decoder: ServerMessageDecoder::new(u32::MAX),
            pending: VecDeque::new(),
            server_id,
            next_request: 0,
        };
        peer.send(&ClientMessage::hello()).await;
        assert!(
            matches!(peer.recv().await, ServerMessage::Hello { .. }),
            "expected the server hello"
        );
        peer
    }

    /// The server target.
    pub(crate) fn server(&self) -> Target {
        Target::Server(self.server_id.clone())
    }

    async fn send(&mut self, msg: &ClientMessage) {
        let frame = encode_frame(msg, u32::MAX).unwrap();
        self.io.write_all(&frame).await.unwrap();
        self.io.flush().await.unwrap();
    }

    /// The next server message (hang-guarded).
    pub(crate) async fn recv(&mut self) -> ServerMessage {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(m) = self.pending.pop_front() {
                return m;
            }
            let n = tokio::time::timeout(HANG, self.io.read(&mut buf))
                .await
                .expect("hung waiting for a server frame")
                .unwrap();
            assert_ne!(n, 0, "the server closed the connection");
            self.pending.extend(self.decoder.push(&buf[..n]).unwrap());
        }
    }

    /// Sends a request and returns its id.
    pub(crate) async fn request(&mut self, target: &Target, call: Value) -> Id {
        self.next_request += 1;
        let id = Id::new(format!("raw-{}", self.next_request)).unwrap();
        self.send(&ClientMessage::Request(Request {
            id: id.clone(),
            target: target.clone(),
            call,
        }))
        .await;
        id
    }

    /// Cancels request `id`.
    pub(crate) async fn cancel(&mut self, id: &Id, target: &Target) {
        self.send(&ClientMessage::Cancel(Cancel {
            id: id.clone(),
            target: target.clone(),
        }))
        .await;
    }

    /// Waits for the response to `id`, skipping service updates and attachments.
    pub(crate) async fn response(&mut self, id: &Id) -> Outcome {
        loop {
            match self.recv().await {
                ServerMessage::Response(Response { id: rid, outcome }) if &rid == id => {
                    return outcome;
                }
                ServerMessage::ServiceUpdate(_) | ServerMessage::Attachment(_) => {}
                other => panic!("expected the response to {id}, got {other:?}"),
            }
        }
    }

    /// Requests and waits for the response.
    pub(crate) async fn call(&mut self, target: &Target, call: Value) -> Outcome {
        let id = self.request(target, call).await;
        self.response(&id).await
    }

    /// Attaches to `session` and returns its route.
    pub(crate) async fn attach(&mut self, session: &str) -> Target {
        let target = self.server();
        let id = self
            .request(
                &target,
                call(
                    "pi.session-management",
                    "attach",
                    vec![Value::from(session)],
                ),
            )
            .await;
        let mut route: Option<SessionTarget> = None;
        loop {
            match self.recv().await {
                ServerMessage::Attachment(a) => route = a,
                ServerMessage::Response(Response { id: rid, outcome }) if rid == id => {
                    assert!(!matches!(outcome, Outcome::Error(_)), "{outcome:?}");
                    break;
                }
                ServerMessage::ServiceUpdate(_) => {}
                other => panic!("expected the attachment, got {other:?}"),
            }
        }
        Target::Session(route.expect("attachment frame before the attach response"))
    }
}
