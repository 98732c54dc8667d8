//! Why a transfer stopped, from either end.

/// Why a transfer stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// Something on this end (its disk, its socket).
    #[error("{0}")]
    Local(String),
    /// The other end said why it stopped.
    #[error("the other end: {0}")]
    Remote(String),
    /// The other end broke the protocol or went silent.
    #[error("{0}")]
    Peer(String),
    /// Interrupted by the user.
    #[error("interrupted")]
    Interrupted,
}
