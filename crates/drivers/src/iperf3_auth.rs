//! Loading iperf3's authentication files for `linerate serve` (the check itself is
//! linerate-proto's `iperf3::auth`, which reads no files and no clock).

pub use linerate_proto::iperf3::auth::Iperf3Auth;
use std::path::Path;

/// Reads the RSA private key (PEM) and the users file, as iperf3's
/// `--rsa-private-key-path` and `--authorized-users-path` name them.
/// `pkcs1`: PKCS #1 v1.5 tokens are taken as well as OAEP ones.
pub fn load(
    private_key: &Path,
    users: &Path,
    skew_s: i64,
    pkcs1: bool,
) -> Result<Iperf3Auth, String> {
    let read = |path: &Path, limit: u64| -> Result<String, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.len() > limit {
            return Err(format!("{}: over {limit} bytes", path.display()));
        }
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let pem = read(private_key, 64 * 1024)?;
    let users_text = read(users, linerate_proto::iperf3::auth::MAX_USERS_FILE as u64)?;
    Iperf3Auth::new(&pem, &users_text, skew_s, pkcs1)
        .map_err(|e| format!("{}: {e}", private_key.display()))
}
