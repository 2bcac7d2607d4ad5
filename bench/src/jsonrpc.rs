//! The jsonrpsee peer: one JSON-RPC server over WebSocket on TCP with `echo` (one string,
//! for the unary tables) and the subscription `sub`/`notif`/`unsub` (for the fan-out table).
//! [`JsonServer`] owns it: whoever needs its address or its go signal is handed the server.

use std::net::SocketAddr;

use jsonrpsee::server::{ServerConfig, ServerHandle};
use jsonrpsee::{PendingSubscriptionSink, RpcModule, SubscriptionMessage};
use tokio::sync::watch;

/// The notification result of `sub` (≈ the size of our update's text content).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Delta {
    /// The token.
    pub delta: String,
}

/// The running jsonrpsee server; dropping it stops the server.
#[derive(Debug)]
pub struct JsonServer {
    addr: SocketAddr,
    /// The fan-out run whose subscribers may send (see [`Self::release`]).
    go: watch::Sender<u64>,
    _handle: ServerHandle,
}

impl JsonServer {
    /// Starts the server on 127.0.0.1 (`TCP_NODELAY`).
    pub async fn start() -> Result<Self, Box<dyn std::error::Error>> {
        let config = ServerConfig::builder()
            .set_tcp_no_delay(true)
            .max_connections(20_000)
            .build();
        let server = jsonrpsee::server::Server::builder()
            .set_config(config)
            .build("127.0.0.1:0")
            .await?;
        let addr = server.local_addr()?;
        let (go, _) = watch::channel(0);
        let mut module = RpcModule::new(go.clone());
        module.register_method("echo", |params, _, _| params.one::<String>())?;
        register_subscription(&mut module)?;
        Ok(Self {
            addr,
            go,
            _handle: server.start(module),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets every subscriber of fan-out run `run` (and of earlier runs) start sending.
    pub fn release(&self, run: u64) {
        self.go.send_replace(run);
    }
}

/// Registers `sub`/`notif`/`unsub`: a subscription to run `n` (its one parameter) waits until
/// run `n` is released, then sends a pre-built result as fast as the sink accepts until the
/// client goes away, so jsonrpsee pays no publisher at all (an upper bound for it).
fn register_subscription(
    module: &mut RpcModule<watch::Sender<u64>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let raw = serde_json::value::to_raw_value(&Delta {
        delta: crate::ours::TOKEN.to_owned(),
    })?;
    module.register_subscription(
        "sub",
        "notif",
        "unsub",
        move |params, pending: PendingSubscriptionSink, go, _| {
            let raw = raw.clone();
            async move {
                let run: u64 = params.one().unwrap_or(0);
                let sink = pending.accept().await?;
                let mut go = go.subscribe();
                // Wait until every subscriber of this run is connected.
                while *go.borrow_and_update() < run {
                    if go.changed().await.is_err() {
                        return Ok(());
                    }
                }
                loop {
                    if sink
                        .send(SubscriptionMessage::from(raw.clone()))
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                }
            }
        },
    )?;
    Ok(())
}
