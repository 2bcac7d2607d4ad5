//! Opening one connection: transport, then the v8 handshake.

use std::sync::Arc;

use baton_protocol::handshake::{ClientHandshake, HandshakeError};
use baton_protocol::{ServerFrameCodec, ServerId, encode_frame};
use futures::StreamExt;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio_util::codec::FramedRead;

use crate::config::ClientConfig;
use crate::error::ConnectError;
use crate::transport::{self, BoxStream};

/// A connected, handshaken transport. The reader keeps any bytes that arrived with the hello.
pub(crate) struct Connection {
    pub(crate) server_id: ServerId,
    pub(crate) reader: FramedRead<ReadHalf<BoxStream>, ServerFrameCodec>,
    pub(crate) writer: WriteHalf<BoxStream>,
}

/// Connects and completes the handshake within the configured timeout.
pub(crate) async fn connect(
    config: &ClientConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
    expected: Option<&ServerId>,
) -> Result<Connection, ConnectError> {
    let endpoint = &config.endpoint;
    let attempt = async {
        let tls = tls.map(|c| (c, config.tls.server_name.as_deref()));
        let stream = transport::open(endpoint, tls, config.tcp_keepalive).await?;
        let (read, mut writer) = tokio::io::split(stream);
        let mut reader = FramedRead::new(read, ServerFrameCodec::new(config.max_frame_length));
        let mut handshake = ClientHandshake::new(expected.cloned());
        let hello = encode_frame(&handshake.start(), config.max_frame_length).map_err(|e| {
            ConnectError::Protocol {
                endpoint: endpoint.clone(),
                source: baton_protocol::DecodeError::Io(e.to_string()),
            }
        })?;
        let io_err = |source| ConnectError::Io {
            endpoint: endpoint.clone(),
            source,
        };
        writer.write_all(&hello).await.map_err(io_err)?;
        writer.flush().await.map_err(io_err)?;
        let first = match reader.next().await {
            // The handshake judges whatever came first; an update is decoded for it (the
            // codec validated its bytes, so this cannot fail).
            Some(Ok(frame)) => frame.into_message().map_err(|_| ConnectError::Protocol {
                endpoint: endpoint.clone(),
                source: baton_protocol::DecodeError::InvalidMessage {
                    side: baton_protocol::Side::Server,
                },
            })?,
            Some(Err(source)) => {
                return Err(match source {
                    // A TLS alert or reset surfaces as I/O on the first read.
                    baton_protocol::DecodeError::Io(reason)
                        if matches!(endpoint, crate::Endpoint::Tls { .. }) =>
                    {
                        ConnectError::Tls {
                            endpoint: endpoint.clone(),
                            reason,
                        }
                    }
                    source => ConnectError::Protocol {
                        endpoint: endpoint.clone(),
                        source,
                    },
                });
            }
            None => {
                return Err(ConnectError::Closed {
                    endpoint: endpoint.clone(),
                });
            }
        };
        let handshake_err = |source: HandshakeError| ConnectError::Handshake {
            endpoint: endpoint.clone(),
            source,
        };
        let server_id = handshake
            .handle_message(&first)
            .map_err(handshake_err)?
            .ok_or_else(|| handshake_err(HandshakeError::ExpectedHello))?;
        Ok(Connection {
            server_id,
            reader,
            writer,
        })
    };
    tokio::time::timeout(config.connect_timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(ConnectError::Timeout {
                endpoint: endpoint.clone(),
            })
        })
}
