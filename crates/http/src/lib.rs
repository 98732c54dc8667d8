//! What every HTTP listener of linerate holds to (the RPM server of `serve --http` and
//! `--https`, and the metrics and grid listener of `--metrics`), so that one client cannot
//! lock the others out for as long as it likes:
//!
//! - **Admission per client**: connections at once in all and per client, where a client
//!   is an IPv4 address or an IPv6 prefix (/64 by default: a host is given a /64 to draw
//!   addresses from, so counting single addresses binds nothing). At a cap, a newcomer
//!   from a client holding fewer connections than the largest holder takes the place of
//!   that holder's oldest idle connection (one that never asked first, then the longest
//!   idle), as the agent listener does: a well-behaved client always finds a place.
//! - **Deadlines**: from accept to the first request (a TLS handshake included, and
//!   hyper's protocol sniff, which waits before HTTP/1's own header timeout starts), and
//!   between requests (HTTP/1 keep-alive and HTTP/2 alike: a connection with no request
//!   under way for that long is closed).
//! - **Headers**: every response says `nosniff`, may not be framed, sends no referrer,
//!   and carries a Content-Security-Policy (a page's own, or none at all allowed).
//!
//! [`Admission`] is the sans-IO table (time is passed in); [`Guard`] wraps it for a Tokio
//! listener.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A nonblocking listener on `addr`; the unspecified IPv6 address falls back to every
/// IPv4 address on a host without IPv6.
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).or_else(|e| match addr.ip() {
        IpAddr::V6(ip) if ip.is_unspecified() => {
            std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port()))
        }
        _ => Err(e),
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A client as the caps count it: an IPv4 address, or an IPv6 address cut to its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    /// `ip`'s client: IPv4 (an IPv4-mapped IPv6 address too) whole, IPv6 cut to
    /// `v6_prefix` bits.
    pub fn of(ip: IpAddr, v6_prefix: u8) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(IpAddr::V4(v4)),
                None => {
                    let keep = u32::from(v6_prefix.min(128));
                    let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                    ClientKey(IpAddr::V6((u128::from(v6) & mask).into()))
                }
            },
        }
    }

    /// The client as an address: the IPv4 address, or the IPv6 prefix's first address.
    pub fn ip(self) -> IpAddr {
        self.0
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/prefix"),
        }
    }
}

/// What a listener allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Connections at once, in all.
    pub max_connections: usize,
    /// Connections at once from one client ([`ClientKey`]).
    pub max_per_client: usize,
    /// From accept to the first request's head (a TLS handshake included).
    pub first_request: Duration,
    /// The longest a connection stays open with no request under way.
    pub idle: Duration,
    /// The bits of an IPv6 address that name its client.
    pub v6_prefix: u8,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_per_client: 256,
            first_request: Duration::from_secs(10),
            idle: Duration::from_secs(30),
            v6_prefix: 64,
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its client holds `max_per_client` already.
    PerClient,
    /// `max_connections` are held and none could give way to it.
    Full,
}

/// Why a connection was closed by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No request within [`Limits::first_request`] of the accept.
    NoFirstRequest,
    /// No request under way for [`Limits::idle`].
    Idle,
}

#[derive(Debug, Clone)]
struct Connection {
    client: ClientKey,
    opened: Instant,
    /// Requests begun, and those under way (a response's body still being sent counts).
    requests: u64,
    active: u32,
    /// When the last request ended (or the connection opened).
    quiet_since: Instant,
}

/// The sans-IO table of connections held: admission, eviction and deadlines.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    next_id: u64,
    connections: BTreeMap<u64, Connection>,
    per_client: BTreeMap<ClientKey, usize>,
}

/// An admitted connection's id, and the one it took the place of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub id: u64,
    pub evicted: Option<u64>,
}

impl Admission {
    pub fn new(limits: Limits) -> Admission {
        Admission {
            limits,
            next_id: 0,
            connections: BTreeMap::new(),
            per_client: BTreeMap::new(),
        }
    }

    pub fn held(&self) -> usize {
        self.connections.len()
    }

    /// Connections held by `ip`'s client.
    pub fn held_by(&self, ip: IpAddr) -> usize {
        let client = ClientKey::of(ip, self.limits.v6_prefix);
        self.per_client.get(&client).copied().unwrap_or(0)
    }

    /// Admits a connection from `ip` at `now`, making room if it must (see the crate's
    /// note); the caller closes the evicted one.
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Result<Admitted, Refusal> {
        let client = ClientKey::of(ip, self.limits.v6_prefix);
        let mine = self.per_client.get(&client).copied().unwrap_or(0);
        if mine >= self.limits.max_per_client {
            return Err(Refusal::PerClient);
        }
        let mut evicted = None;
        if self.connections.len() >= self.limits.max_connections {
            let victim = self.victim(client, mine).ok_or(Refusal::Full)?;
            self.release(victim);
            evicted = Some(victim);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.connections.insert(
            id,
            Connection {
                client,
                opened: now,
                requests: 0,
                active: 0,
                quiet_since: now,
            },
        );
        *self.per_client.entry(client).or_default() += 1;
        Ok(Admitted { id, evicted })
    }

    /// The connection a newcomer from `client` (holding `mine`) may take the place of:
    /// the largest holder's, if it holds more than the newcomer would; the oldest that
    /// never asked, else the one idle longest. None: every one of them is serving.
    fn victim(&self, client: ClientKey, mine: usize) -> Option<u64> {
        let (&largest, &count) = self
            .per_client
            .iter()
            .filter(|(c, _)| **c != client)
            .max_by_key(|(_, n)| **n)?;
        if count <= mine {
            return None;
        }
        let idle = self
            .connections
            .iter()
            .filter(|(_, c)| c.client == largest && c.active == 0);
        idle.min_by_key(|(_, c)| (c.requests > 0, c.quiet_since.max(c.opened)))
            .map(|(&id, _)| id)
    }

    /// Forgets a connection (closed, or evicted); a second call does nothing.
    pub fn release(&mut self, id: u64) {
        if let Some(connection) = self.connections.remove(&id) {
            if let Some(n) = self.per_client.get_mut(&connection.client) {
                *n -= 1;
                if *n == 0 {
                    self.per_client.remove(&connection.client);
                }
            }
        }
    }

    pub fn request_began(&mut self, id: u64) {
        if let Some(c) = self.connections.get_mut(&id) {
            c.requests += 1;
            c.active += 1;
        }
    }

    pub fn request_ended(&mut self, id: u64, now: Instant) {
        if let Some(c) = self.connections.get_mut(&id) {
            c.active = c.active.saturating_sub(1);
            c.quiet_since = now;
        }
    }

    /// When `id` is due to be closed if nothing happens meanwhile; `None` while a request
    /// is under way (or once it is gone).
    pub fn deadline(&self, id: u64) -> Option<(Instant, Expiry)> {
        let c = self.connections.get(&id)?;
        if c.active > 0 {
            return None;
        }
        Some(if c.requests == 0 {
            (c.opened + self.limits.first_request, Expiry::NoFirstRequest)
        } else {
            (c.quiet_since + self.limits.idle, Expiry::Idle)
        })
    }

    /// Whether `id` was released (closed or evicted).
    pub fn is_gone(&self, id: u64) -> bool {
        !self.connections.contains_key(&id)
    }
}

/// Now, on Tokio's clock (a paused test clock too) as the table takes it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The table for a Tokio listener, with a way to close an evicted connection's task.
#[derive(Clone)]
pub struct Guard {
    table: Arc<Mutex<Admission>>,
    closers: Arc<Mutex<BTreeMap<u64, Arc<tokio::sync::Notify>>>>,
}

impl Guard {
    pub fn new(limits: Limits) -> Guard {
        Guard {
            table: Arc::new(Mutex::new(Admission::new(limits))),
            closers: Arc::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Admission> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.table().held()
    }

    /// A place for a connection from `ip`, or why there is none. A connection it takes
    /// the place of is told to close.
    pub fn admit(&self, ip: IpAddr) -> Result<Slot, Refusal> {
        let admitted = self.table().admit(ip, now())?;
        let close = Arc::new(tokio::sync::Notify::new());
        let mut closers = self.closers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(evicted) = admitted.evicted.and_then(|id| closers.remove(&id)) {
            evicted.notify_one();
        }
        closers.insert(admitted.id, close.clone());
        Ok(Slot {
            activity: Activity {
                guard: self.clone(),
                id: admitted.id,
            },
            close,
        })
    }
}

/// An admitted connection's place; dropped, it is given back.
pub struct Slot {
    activity: Activity,
    close: Arc<tokio::sync::Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let guard = &self.activity.guard;
        guard.table().release(self.activity.id);
        guard
            .closers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.activity.id);
    }
}

/// How a held connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The connection itself ended (the client closed it, or it failed).
    Closed,
    /// Its deadline passed.
    Expired(Expiry),
    /// A newcomer took its place.
    Evicted,
}

impl Slot {
    /// Marks requests on this connection, for its deadlines: give it to the service.
    pub fn activity(&self) -> Activity {
        self.activity.clone()
    }

    /// Runs `connection` (a TLS handshake and the HTTP connection after it) until it ends,
    /// its deadline passes or a newcomer takes its place; whatever is left of it is
    /// dropped, which closes the socket.
    pub async fn hold<F: Future>(self, connection: F) -> Ended {
        let activity = self.activity.clone();
        let watchdog = async move {
            loop {
                let due = activity.guard.table().deadline(activity.id);
                match due {
                    Some((at, why)) if at <= now() => return why,
                    Some((at, _)) => {
                        // Woken at the deadline, or sooner to see a request that ended.
                        let wait = at.saturating_duration_since(now());
                        tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                    }
                    None => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        };
        tokio::select! {
            _ = connection => Ended::Closed,
            why = watchdog => Ended::Expired(why),
            _ = self.close.notified() => Ended::Evicted,
        }
    }
}

/// Marks the requests of one connection.
#[derive(Clone)]
pub struct Activity {
    guard: Guard,
    id: u64,
}

impl Activity {
    /// A request began; it is under way until the returned mark is dropped (give it to
    /// the response's body with [`Tracked`], so a long download counts as under way).
    pub fn begin(&self) -> Busy {
        self.guard.table().request_began(self.id);
        Busy {
            activity: self.clone(),
        }
    }
}

/// A request under way; dropped, it ended.
pub struct Busy {
    activity: Activity,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.activity
            .guard
            .table()
            .request_ended(self.activity.id, now());
    }
}

/// A response body that keeps its request under way until it is sent or dropped.
pub struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B> Tracked<B> {
    pub fn new(body: B, busy: Busy) -> Tracked<B> {
        Tracked { body, _busy: busy }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The Content-Security-Policy of a response that is not a page: nothing may load.
pub const NO_CONTENT_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

/// Adds the headers every response carries: no MIME sniffing, no framing, no referrer,
/// and a Content-Security-Policy (`page_policy` for a page, else nothing allowed). A
/// policy the handler set already is kept.
pub fn secure(headers: &mut hyper::HeaderMap, page_policy: Option<&'static str>) {
    use hyper::header::{HeaderValue, CONTENT_SECURITY_POLICY, REFERRER_POLICY};
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        hyper::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if !headers.contains_key(CONTENT_SECURITY_POLICY) {
        headers.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(page_policy.unwrap_or(NO_CONTENT_POLICY)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn limits(max_connections: usize, max_per_client: usize) -> Limits {
        Limits {
            max_connections,
            max_per_client,
            ..Limits::default()
        }
    }

    #[test]
    fn a_client_is_an_ipv4_address_or_an_ipv6_slash_64() {
        let a = ClientKey::of(ip("2001:db8:1:2::1"), 64);
        assert_eq!(a, ClientKey::of(ip("2001:db8:1:2:ffff::9"), 64));
        assert_ne!(a, ClientKey::of(ip("2001:db8:1:3::1"), 64));
        assert_eq!(
            ClientKey::of(ip("::ffff:10.0.0.1"), 64),
            ClientKey::of(ip("10.0.0.1"), 64)
        );
        assert_ne!(
            ClientKey::of(ip("10.0.0.1"), 64),
            ClientKey::of(ip("10.0.0.2"), 64)
        );
        assert_ne!(
            ClientKey::of(ip("2001:db8::1"), 128),
            ClientKey::of(ip("2001:db8::2"), 128)
        );
    }

    #[test]
    fn four_addresses_of_one_slash_64_share_one_clients_cap() {
        let now = Instant::now();
        let mut table = Admission::new(limits(1024, 256));
        for i in 0..1024 {
            let from = ip(&format!("2001:db8::{:x}", i % 4 + 1));
            let admitted = table.admit(from, now);
            assert_eq!(admitted.is_ok(), i < 256, "connection {i}");
        }
        assert_eq!(table.held(), 256);
        assert!(table.admit(ip("2001:db8:0:1::1"), now).is_ok());
    }

    #[test]
    fn at_the_cap_a_newcomer_takes_the_largest_holders_oldest_idle_place() {
        let t0 = Instant::now();
        let mut table = Admission::new(limits(4, 4));
        let flooder = ip("192.0.2.1");
        let ids: Vec<u64> = (0..4)
            .map(|i| {
                let at = t0 + Duration::from_millis(i);
                table.admit(flooder, at).unwrap().id
            })
            .collect();
        // The first asked once and is idle; the others never asked: one of those goes
        // first, the oldest.
        table.request_began(ids[0]);
        table.request_ended(ids[0], t0 + Duration::from_millis(10));
        let admitted = table.admit(ip("198.51.100.7"), t0).unwrap();
        assert_eq!(admitted.evicted, Some(ids[1]));
        // The flooder itself finds no place at the cap: it is the largest holder.
        assert_eq!(table.admit(flooder, t0), Err(Refusal::Full));
        // A connection serving a request is never taken.
        for &id in &ids[2..] {
            table.request_began(id);
        }
        let evicted = table.admit(ip("203.0.113.9"), t0).unwrap().evicted;
        assert_eq!(evicted, Some(ids[0]), "the idle one, not those serving");
        assert_eq!(table.admit(ip("203.0.113.10"), t0), Err(Refusal::Full));
        assert_eq!(table.held(), 4);
    }

    #[test]
    fn deadlines_run_from_the_accept_and_between_requests_not_during_one() {
        let t0 = Instant::now();
        let mut table = Admission::new(limits(8, 8));
        let id = table.admit(ip("192.0.2.1"), t0).unwrap().id;
        assert_eq!(
            table.deadline(id),
            Some((t0 + Duration::from_secs(10), Expiry::NoFirstRequest))
        );
        table.request_began(id);
        assert_eq!(table.deadline(id), None, "a long download is under way");
        let done = t0 + Duration::from_secs(40);
        table.request_ended(id, done);
        assert_eq!(
            table.deadline(id),
            Some((done + Duration::from_secs(30), Expiry::Idle))
        );
        table.release(id);
        table.release(id);
        assert!(table.is_gone(id));
        assert_eq!(table.held_by(ip("192.0.2.1")), 0);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_silent_connection_is_closed_at_its_first_request_deadline() {
        let guard = Guard::new(Limits {
            first_request: Duration::from_secs(3),
            ..Limits::default()
        });
        let slot = guard.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(guard.held(), 1);
        let ended = slot.hold(std::future::pending::<()>()).await;
        assert_eq!(ended, Ended::Expired(Expiry::NoFirstRequest));
        assert_eq!(guard.held(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_evicted_connection_is_closed() {
        let guard = Guard::new(limits(1, 1));
        let slot = guard.admit(ip("192.0.2.1")).unwrap();
        let held = tokio::spawn(slot.hold(std::future::pending::<()>()));
        tokio::task::yield_now().await;
        let newcomer = guard.admit(ip("192.0.2.2"));
        assert!(newcomer.is_ok());
        assert_eq!(held.await.unwrap(), Ended::Evicted);
    }

    #[test]
    fn every_response_gets_the_security_headers() {
        let mut headers = hyper::HeaderMap::new();
        secure(&mut headers, None);
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["content-security-policy"], NO_CONTENT_POLICY);
        let mut page = hyper::HeaderMap::new();
        page.insert(
            "content-security-policy",
            "default-src 'self'".parse().unwrap(),
        );
        secure(&mut page, None);
        assert_eq!(page["content-security-policy"], "default-src 'self'");
    }
}
