//! A unix-socket relay between a client and a host whose host→client direction the test
//! can hold: while held, the client's replica stays as it was (what a slow or congested
//! link shows), while what the client sends still reaches the host. That turns races such
//! as "a steer for a turn that has already ended" into a sequence the test drives.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// Bytes moved per read.
const CHUNK: usize = 16 << 10;

/// The relay: listening at [`Relay::url`], forwarding every connection to the host.
pub(crate) struct Relay {
    socket: PathBuf,
    /// One permit: each host→client write takes it, [`Relay::hold`] keeps it.
    valve: Arc<Semaphore>,
    /// The accept loop and the copies (aborted when the relay is dropped).
    _tasks: JoinSet<()>,
}

/// While alive, nothing flows from the host to the client; dropping it lets it flow again.
pub(crate) struct Held(#[allow(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

impl Relay {
    /// A relay at `<dir>/relay.sock` to the host listening at `host`.
    pub(crate) fn start(dir: &Path, host: &Path) -> Self {
        let socket = dir.join("relay.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let valve = Arc::new(Semaphore::new(1));
        let mut tasks = JoinSet::new();
        let host = host.to_owned();
        let gate = valve.clone();
        tasks.spawn(async move {
            let mut copies = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = UnixStream::connect(&host).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut host_read, mut host_write) = upstream.into_split();
                copies.spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut host_write).await;
                    let _ = host_write.shutdown().await;
                });
                let gate = gate.clone();
                copies.spawn(async move {
                    let mut buf = vec![0u8; CHUNK];
                    loop {
                        let n = match host_read.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        // A chunk read while held waits here until the hold ends.
                        let Ok(_permit) = gate.acquire().await else {
                            break;
                        };
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = client_write.shutdown().await;
                });
            }
        });
        Self {
            socket,
            valve,
            _tasks: tasks,
        }
    }

    /// The address to give the client.
    pub(crate) fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Holds the host→client direction; returns once no write to the client is under way.
    pub(crate) async fn hold(&self) -> Held {
        Held(
            super::state::guard("holding the relay", self.valve.clone().acquire_owned())
                .await
                .unwrap(),
        )
    }
}
