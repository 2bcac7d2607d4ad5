//! The tonic peer: a gRPC unary `Echo` over HTTP/2 on TCP with prost messages, generated from
//! `proto/echo.proto` by `build.rs` (with the protoc that `protoc-bin-vendored` ships). The
//! request carries the same 64 bytes as tarpc's `echo(Vec<u8>)`; no TLS, no compression.

use std::net::SocketAddr;

use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

/// The generated messages, client and server.
#[allow(missing_docs, clippy::all, clippy::pedantic, unused_qualifications)]
mod pb {
    tonic::include_proto!("bench");
}

pub use pb::EchoRequest;
use pb::echo_server::{Echo, EchoServer};

/// The tonic client over one `Channel` (one HTTP/2 connection); clones share it.
pub type GrpcClient = pb::echo_client::EchoClient<Channel>;

/// Returns the payload.
#[derive(Debug)]
struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<pb::EchoReply>, Status> {
        Ok(Response::new(pb::EchoReply {
            payload: request.into_inner().payload,
        }))
    }
}

/// Starts the tonic server on 127.0.0.1 (`TCP_NODELAY`) for the life of the process.
pub fn start() -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse()?)?.with_nodelay(Some(true));
    let addr = incoming.local_addr()?;
    tokio::spawn(
        Server::builder()
            .tcp_nodelay(true)
            .serve_with_incoming(EchoServer::new(EchoService), incoming),
    );
    Ok(addr)
}

/// One client on its own HTTP/2 connection.
pub async fn connect(addr: SocketAddr) -> Result<GrpcClient, Box<dyn std::error::Error>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(pb::echo_client::EchoClient::new(channel))
}
