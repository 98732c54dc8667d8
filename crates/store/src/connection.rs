//! How the archive is reached: a PostgreSQL connection string (a URL or libpq's
//! `key=value` form), its password from where `ps` cannot see it, TLS as libpq's
//! `sslmode` asks, and every message that names the string naming it without the password.
//!
//! - **Password**: in the string (`postgres://user:pw@host/db`, `?password=`, `password=`)
//!   it works, but every local user's `ps` shows it; so, as libpq does, it may instead
//!   come from `--store-password-file FILE`, `PGPASSWORD`, or the password file
//!   (`PGPASSFILE`, else `~/.pgpass`: `host:port:database:user:password`, `*` for any).
//! - **TLS** (`sslmode`, as libpq reads it): `disable`; `prefer` (TLS when the server
//!   offers it, unverified); `require` (TLS, unverified, or checked against `sslrootcert`
//!   when one is given, as libpq does); `verify-ca` (the chain to `sslrootcert`);
//!   `verify-full` (the chain and the host's name or address). Without `sslmode`, a host
//!   on this machine (loopback, a Unix socket) is `prefer` and **any other is
//!   `verify-full`**: results and the password never cross a network in clear by default.
//!   `sslrootcert` is a PEM file, or `system` for the system's bundle; without it
//!   `~/.postgresql/root.crt`, else the system's bundle. rustls speaks TLS (TLS 1.2 and
//!   1.3); libpq's client certificates (`sslcert`, `sslkey`) are not supported and are
//!   refused by name.

use crate::StoreError;
use postgres::config::{Host, SslMode as WireSslMode};
use postgres::Config;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// libpq's `sslmode`, of those linerate honours (`allow` is taken as `prefer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                "sslmode '{other}' is not one of disable, prefer, require, verify-ca, verify-full"
            ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the password may come from besides the string itself.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `--store-password-file`: the password is the file's first line.
    pub password_file: Option<PathBuf>,
    /// `PGPASSWORD`.
    pub env_password: Option<String>,
    /// `PGPASSFILE`, else `~/.pgpass` (read when it exists).
    pub passfile: Option<PathBuf>,
}

impl Credentials {
    /// From the environment, as libpq reads it, with `password_file` from the flag.
    pub fn from_env(password_file: Option<PathBuf>) -> Credentials {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Credentials {
            password_file,
            env_password: std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()),
            passfile: std::env::var_os("PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".pgpass"))),
        }
    }
}

/// A connection string taken apart: what the client connects with, how TLS is checked,
/// and the string as messages show it.
pub struct Target {
    pub config: Config,
    pub ssl: SslMode,
    pub root_cert: Option<PathBuf>,
    /// The string with its password replaced: for every message.
    pub shown: String,
}

/// `text` with any password in it replaced by `***`: the user-information of a URL, a
/// `password=` parameter of a URL or of the key-value form.
pub fn redact(text: &str) -> String {
    let text = text.trim();
    if let Some(scheme_end) = text.find("://") {
        let (head, rest) = text.split_at(scheme_end + 3);
        let (main, query) = match rest.find('?') {
            Some(q) => (&rest[..q], Some(&rest[q + 1..])),
            None => (rest, None),
        };
        let main = match main.rfind('@') {
            Some(at) if main[..at].contains(':') => {
                let user = &main[..main[..at].find(':').unwrap_or(at)];
                format!("{user}:***{}", &main[at..])
            }
            _ => main.to_string(),
        };
        let query = query.map(|q| {
            q.split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => pair.to_string(),
                })
                .collect::<Vec<_>>()
                .join("&")
        });
        return match query {
            Some(q) => format!("{head}{main}?{q}"),
            None => format!("{head}{main}"),
        };
    }
    match key_values(text) {
        Ok(pairs) => pairs
            .iter()
            .map(|(k, v)| {
                if k == "password" {
                    format!("{k}=***")
                } else if v.is_empty() || v.contains([' ', '\'', '\\']) {
                    format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
                } else {
                    format!("{k}={v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        // Not even key=value pairs: nothing of it is shown.
        Err(_) => "(a connection string that could not be read)".to_string(),
    }
}

/// libpq's key-value form: `key=value` pairs apart by spaces, a value in single quotes
/// when it has spaces, `\` escaping within.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("'{key}' has no value (key=value)"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(format!("the value of '{key}' has no closing quote")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// Percent-decoding of a URL's parameter value.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(a), Some(b)) if hex(a).is_some() && hex(b).is_some() => {
                out.push((hex(a).unwrap_or(0) * 16 + hex(b).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The TLS parameters of a connection string, taken out of it (the client below them
/// knows `disable`, `prefer` and `require` only), and the rest of the string.
fn split_tls(text: &str) -> Result<(String, Option<String>, Option<String>), String> {
    let mut mode = None;
    let mut root = None;
    let mut take = |key: &str, value: String| -> Result<bool, String> {
        match key {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" => {
                return Err(format!(
                    "{key} is not supported (the archive's client has no client certificates)"
                ))
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    if text.contains("://") {
        let (main, query) = match text.split_once('?') {
            Some((main, query)) => (main, query),
            None => (text, ""),
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(key, percent_decoded(value))? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            main.to_string()
        } else {
            format!("{main}?{}", kept.join("&"))
        };
        Ok((rest, mode, root))
    } else {
        let mut kept = Vec::new();
        for (key, value) in key_values(text)? {
            if !take(&key, value.clone())? {
                kept.push(format!(
                    "{key}='{}'",
                    value.replace('\\', "\\\\").replace('\'', "\\'")
                ));
            }
        }
        Ok((kept.join(" "), mode, root))
    }
}

/// Whether every host of `config` is this machine: a Unix socket, `localhost`, or a
/// loopback address.
fn all_local(config: &Config) -> bool {
    config.get_hosts().iter().all(|host| match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            name == "localhost"
                || name
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// A password file's line for (host, port, database, user), `*` matching anything.
fn from_passfile(path: &Path, config: &Config) -> Option<Vec<u8>> {
    let text = std::fs::read_to_string(path).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        _ => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("");
    let dbname = config.get_dbname().unwrap_or(user);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // Fields apart by ':', a ':' or '\' within one escaped by '\'.
        let mut fields = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => fields.last_mut()?.extend(chars.next()),
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut()?.push(c),
            }
        }
        if fields.len() != 5 {
            continue;
        }
        let wanted = [&host, &port, &dbname.to_string(), &user.to_string()];
        if fields[..4]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field == "*" || field == want)
        {
            return Some(fields[4].clone().into_bytes());
        }
    }
    None
}

/// Reads a connection string: its password from the string or else from `credentials`,
/// its TLS as `sslmode` says (or the default for its hosts).
pub fn target(text: &str, credentials: &Credentials) -> Result<Target, StoreError> {
    let shown = redact(text);
    let invalid = |why: String| StoreError::Archive {
        url: shown.clone(),
        why,
    };
    let (rest, mode, root) = split_tls(text.trim()).map_err(&invalid)?;
    let mut config =
        Config::from_str(&rest).map_err(|e| invalid(format!("invalid connection string: {e}")))?;
    if config.get_password().is_none() {
        let password = match (&credentials.password_file, &credentials.env_password) {
            (Some(file), _) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    invalid(format!("--store-password-file {}: {e}", file.display()))
                })?;
                Some(text.lines().next().unwrap_or("").as_bytes().to_vec())
            }
            (None, Some(password)) => Some(password.as_bytes().to_vec()),
            (None, None) => credentials
                .passfile
                .as_deref()
                .and_then(|path| from_passfile(path, &config)),
        };
        if let Some(password) = password {
            config.password(password);
        }
    }
    let ssl = match mode {
        Some(mode) => SslMode::parse(&mode).map_err(&invalid)?,
        None if all_local(&config) => SslMode::Prefer,
        None => SslMode::VerifyFull,
    };
    config.ssl_mode(match ssl {
        SslMode::Disable => WireSslMode::Disable,
        SslMode::Prefer => WireSslMode::Prefer,
        _ => WireSslMode::Require,
    });
    Ok(Target {
        config,
        ssl,
        root_cert: root.map(PathBuf::from),
        shown,
    })
}

/// The system's bundle of trusted certificates (Debian's, and where other distributions
/// keep theirs).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

fn roots(from: &Path) -> Result<rustls::RootCertStore, String> {
    let pem = std::fs::read(from).map_err(|e| format!("sslrootcert {}: {e}", from.display()))?;
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", from.display()))?;
        store
            .add(cert)
            .map_err(|e| format!("sslrootcert {}: {e}", from.display()))?;
    }
    if store.is_empty() {
        return Err(format!(
            "sslrootcert {}: no PEM certificate in it",
            from.display()
        ));
    }
    Ok(store)
}

/// The file of trusted certificates for verify-ca and verify-full (see the module's note).
fn root_file(given: Option<&Path>) -> Result<PathBuf, String> {
    match given {
        Some(path) if path != Path::new("system") => Ok(path.to_path_buf()),
        given => {
            let home = std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
                .filter(|p| given.is_none() && p.exists());
            home.or_else(|| {
                SYSTEM_BUNDLES
                    .iter()
                    .map(PathBuf::from)
                    .find(|p| p.exists())
            })
            .ok_or_else(|| {
                "no trusted certificates to check the archive's against: give sslrootcert=FILE \
                 (or sslmode=require to encrypt without checking)"
                    .to_string()
            })
        }
    }
}

/// The rustls client for `target`'s `sslmode`.
pub fn tls_config(target: &Target) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let check = match (target.ssl, &target.root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => None,
        (SslMode::Require | SslMode::VerifyCa, root) => Some((root.as_deref(), false)),
        (SslMode::VerifyFull, root) => Some((root.as_deref(), true)),
    };
    let config = match check {
        None => builder
            .dangerous()
            // libpq's meaning of these modes: encrypted, the certificate unchecked.
            .with_custom_certificate_verifier(Arc::new(linerate_tls::verify::AnyCertificate(
                provider,
            )))
            .with_no_client_auth(),
        Some((root, names)) => {
            let roots = roots(&root_file(root)?)?;
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| e.to_string())?;
            if names {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                    .with_no_client_auth()
            }
        }
    };
    Ok(config)
}

/// `verify-ca`: the chain to a trusted root, whatever name the certificate carries.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(NotValidForName))
            | Err(rustls::Error::InvalidCertificate(NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Credentials {
        Credentials::default()
    }

    #[test]
    fn passwords_are_replaced_in_every_form() {
        assert_eq!(
            redact("postgres://mesh:s3cret@db.example:5432/linerate"),
            "postgres://mesh:***@db.example:5432/linerate"
        );
        assert_eq!(
            redact("postgres://u:pw@h/db?password=X&sslmode=require"),
            "postgres://u:***@h/db?password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgres://db.example/linerate"),
            "postgres://db.example/linerate"
        );
        assert_eq!(
            redact("host=db user=mesh password='s3 cret' dbname=x"),
            "host=db user=mesh password=*** dbname=x"
        );
        assert!(!redact("host=db password=s3cret 'unclosed").contains("s3cret"));
    }

    #[test]
    fn a_remote_host_is_verify_full_by_default_and_a_local_one_prefer() {
        let remote = target("postgres://u@db.example/x", &none()).unwrap();
        assert_eq!(remote.ssl, SslMode::VerifyFull);
        let local = target("postgres://u@127.0.0.1:5432/x", &none()).unwrap();
        assert_eq!(local.ssl, SslMode::Prefer);
        let asked = target(
            "postgres://u@db.example/x?sslmode=verify-ca&sslrootcert=/tmp/ca.pem&application_name=m",
            &none(),
        )
        .unwrap();
        assert_eq!(asked.ssl, SslMode::VerifyCa);
        assert_eq!(asked.root_cert.as_deref(), Some(Path::new("/tmp/ca.pem")));
        assert_eq!(asked.config.get_application_name(), Some("m"));
        let kv = target("host=db.example user=u sslmode=disable", &none()).unwrap();
        assert_eq!(kv.ssl, SslMode::Disable);
        let refused = target("postgres://u@h/x?sslmode=verify-everything", &none());
        assert!(refused.is_err());
        let refused = target("postgres://u@h/x?sslcert=/c.pem", &none());
        assert!(refused.err().unwrap().to_string().contains("sslcert"));
    }

    #[test]
    fn the_password_comes_from_the_file_the_environment_or_the_passfile() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let passfile = dir.path().join("pgpass");
        std::fs::write(
            &passfile,
            "# comment\nother:*:*:*:no\ndb.example:5432:*:mesh:from\\:pgpass\n",
        )
        .unwrap();
        let url = "postgres://mesh@db.example/linerate";
        let password = |credentials: Credentials| {
            target(url, &credentials)
                .unwrap()
                .config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        let all = Credentials {
            password_file: Some(file.clone()),
            env_password: Some("from-env".into()),
            passfile: Some(passfile.clone()),
        };
        assert_eq!(password(all.clone()).as_deref(), Some("from-file"));
        let env = Credentials {
            password_file: None,
            ..all.clone()
        };
        assert_eq!(password(env).as_deref(), Some("from-env"));
        let pgpass = Credentials {
            password_file: None,
            env_password: None,
            ..all
        };
        assert_eq!(password(pgpass).as_deref(), Some("from:pgpass"));
        // One in the string wins, as libpq's does.
        let inline = target("postgres://mesh:inline@db.example/x", &none()).unwrap();
        assert_eq!(inline.config.get_password(), Some(&b"inline"[..]));
    }

    #[test]
    fn an_invalid_string_is_named_without_its_password() {
        let error = target("postgres://u:pw1@h/db?password=X&bogus=1", &none())
            .err()
            .unwrap()
            .to_string();
        assert!(!error.contains("pw1") && !error.contains("=X"), "{error}");
        assert!(error.contains("***"), "{error}");
    }
}
