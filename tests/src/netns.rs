//! Two network namespaces joined by a veth pair: a server side and a client side that talk
//! over a real (virtual) link, so a test can cut the link and make a connection half-open —
//! no FIN, no RST, packets silently lost — which loopback cannot do.
//!
//! Needs root and iproute2 (`ip`). Where they are missing, [`NetPair::create`] returns `None`
//! and the test says it skipped, unless `BATON_REQUIRE_NETNS=1` (set by `.ci/run`) makes
//! that a failure. Only namespaces this harness creates are touched; the machine's own
//! network is not.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use baton_testkit::Need;

/// The server side's address on the link.
pub const SERVER_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
/// The client side's address on the link.
pub const CLIENT_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));

/// Which end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Holds [`SERVER_ADDR`] on interface `vs`.
    Server,
    /// Holds [`CLIENT_ADDR`] on interface `vc`.
    Client,
}

/// A pair of namespaces (deleted on drop, which also removes the veth pair).
#[derive(Debug)]
pub struct NetPair {
    server: String,
    client: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetPair {
    /// Creates the namespaces and the link. `None` (with the reason on stderr) when this
    /// machine cannot; panics instead when `BATON_REQUIRE_NETNS=1`.
    pub fn create() -> Option<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let pair = Self {
            server: format!("baton-{pid}-{n}-s"),
            client: format!("baton-{pid}-{n}-c"),
        };
        match pair.setup() {
            Ok(()) => Some(pair),
            Err(reason) => {
                drop(pair);
                Need::Netns.skip(format_args!("cannot create network namespaces: {reason}"));
                None
            }
        }
    }

    fn setup(&self) -> Result<(), String> {
        let (s, c) = (self.server.as_str(), self.client.as_str());
        ip(&["netns", "add", s])?;
        ip(&["netns", "add", c])?;
        ip(&[
            "-n", s, "link", "add", "vs", "type", "veth", "peer", "name", "vc", "netns", c,
        ])?;
        ip(&["-n", s, "addr", "add", "10.77.0.1/30", "dev", "vs"])?;
        ip(&["-n", c, "addr", "add", "10.77.0.2/30", "dev", "vc"])?;
        for (ns, dev) in [(s, "vs"), (c, "vc"), (s, "lo"), (c, "lo")] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// Runs `f` on a new thread that lives in `side`'s namespace: every socket it creates
    /// (including a tokio runtime's, if `f` builds a current-thread runtime) is there.
    pub fn spawn_in<R, F>(&self, side: Side, f: F) -> JoinHandle<R>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        let name = match side {
            Side::Server => self.server.clone(),
            Side::Client => self.client.clone(),
        };
        std::thread::spawn(move || {
            let ns = std::fs::File::open(format!("/run/netns/{name}")).expect("open netns");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
            f()
        })
    }

    /// Cuts the link by taking the client's interface down: from then on both ends lose
    /// every packet silently, as when a laptop lid closes or a route disappears.
    pub fn cut(&self) {
        ip(&["-n", &self.client, "link", "set", "vc", "down"]).expect("cut the link");
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        for ns in [&self.server, &self.client] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
