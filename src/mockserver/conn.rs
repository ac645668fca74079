//! Connections a handler can cut: a listener whose streams carry a kill
//! switch, exposed to handlers as connect info, so a fault can drop the
//! connection without writing a single byte (refused) or abort it with a TCP
//! RST (reset).

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

const ALIVE: u8 = 0;
const CLOSE: u8 = 1;
const RESET: u8 = 2;

/// How a connection is to end; shared by the stream and its handle.
#[derive(Debug, Default)]
struct Switch(AtomicU8);

/// A handler's grip on its connection (connect info of [`KillableListener`]).
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle {
    switch: Arc<Switch>,
}

impl ConnHandle {
    /// From now on nothing more is written; the connection closes (FIN).
    pub(crate) fn close(&self) {
        let _ = self
            .switch
            .0
            .compare_exchange(ALIVE, CLOSE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// From now on nothing more is written; the connection is aborted (RST).
    pub(crate) fn reset(&self) {
        self.switch.0.store(RESET, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        ConnHandle {
            switch: stream.io().switch.clone(),
        }
    }
}

/// A TCP listener whose connections can be cut from inside a handler.
pub(crate) struct KillableListener {
    inner: TcpListener,
}

impl KillableListener {
    /// Wraps a bound listener.
    pub(crate) fn new(inner: TcpListener) -> Self {
        Self { inner }
    }
}

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((inner, addr)) => {
                    let _ = inner.set_nodelay(true);
                    let io = KillableStream {
                        inner,
                        switch: Arc::default(),
                        lingered: false,
                    };
                    return (io, addr);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "mock server: accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP stream that fails every operation once its switch is thrown.
pub(crate) struct KillableStream {
    inner: TcpStream,
    switch: Arc<Switch>,
    lingered: bool,
}

impl KillableStream {
    /// The error to return if the connection was killed (arming RST first if asked).
    fn killed(&mut self) -> Option<io::Error> {
        match self.switch.0.load(Ordering::Acquire) {
            ALIVE => None,
            state => {
                if state == RESET && !self.lingered {
                    self.lingered = true;
                    // Linger zero: dropping the socket sends RST instead of FIN.
                    let _ = self.inner.set_zero_linger();
                }
                Some(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "mock server cut the connection",
                ))
            }
        }
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
