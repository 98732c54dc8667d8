//! A data connection as the stream and request/response loops see it: bytes in and out
//! of a TCP socket, through TLS when the test asked for it. Everything else a loop does
//! with the socket (TCP_INFO, options, polling, shutdown) goes to the TCP socket beneath.

use linerate_tls::{TlsFacts, TlsStream};
use mio::net::TcpStream;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// A connected TCP data connection, plain or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The connection a flow spec hands over, and what its TLS is (kTLS connections are
    /// plain sockets to us: the kernel seals and opens their records).
    /// A note on how the connection runs comes with it (kTLS refused).
    /// `frugal`: the connection is one of many, and its TLS holds as little as it can
    /// between calls ([`TlsStream::set_frugal`]).
    pub(crate) fn of(
        socket: crate::flow::FlowSocket,
        frugal: bool,
    ) -> (Stream, Option<TlsFacts>, Option<String>) {
        match socket {
            crate::flow::FlowSocket::Tcp(stream) => {
                (Stream::Plain(TcpStream::from_std(stream)), None, None)
            }
            crate::flow::FlowSocket::Ktls(stream, facts) => (
                Stream::Plain(TcpStream::from_std(stream)),
                Some(facts),
                None,
            ),
            crate::flow::FlowSocket::Tls(mut tls) => {
                let facts = tls.facts();
                let note = tls.take_note();
                let mut tls = tls.map_socket(TcpStream::from_std);
                tls.set_frugal(frugal);
                (Stream::Tls(Box::new(tls)), Some(facts), note)
            }
            _ => unreachable!("only TCP connections become streams"),
        }
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.socket(),
        }
    }

    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.socket_mut(),
        }
    }

    /// Time spent sealing and opening records in this process (zero for plain and kTLS).
    pub(crate) fn crypto_time(&self) -> Duration {
        match self {
            Stream::Plain(_) => Duration::ZERO,
            Stream::Tls(t) => t.crypto_time(),
        }
    }

    /// Whether a short read or write means the socket ran dry or full. Through TLS it
    /// does not: a read returns one record's bytes, a write what the record buffer took.
    pub(crate) fn short_means_drained(&self) -> bool {
        matches!(self, Stream::Plain(_))
    }

    /// Ends our sending half: sealed records still queued go first (within the socket's
    /// timeout, if any), then the FIN.
    pub(crate) fn shutdown_write(&mut self) -> io::Result<()> {
        if let Stream::Tls(t) = self {
            let _ = t.send_records();
        }
        self.tcp().shutdown(Shutdown::Write)
    }

    /// Sends the sealed records still queued (through TLS; nothing for plain and kTLS).
    /// `Ok` once none is left; `WouldBlock`/`TimedOut` while the socket is full.
    pub(crate) fn send_sealed(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.send_records(),
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp().shutdown(how)
    }

    pub(crate) fn set_write_limit(&mut self, limit: usize) {
        if let Stream::Tls(t) = self {
            t.set_write_limit(limit);
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.send_records(),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}

impl mio::event::Source for Stream {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.tcp_mut().register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.tcp_mut().reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.tcp_mut().deregister(registry)
    }
}
