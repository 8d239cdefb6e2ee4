//! TLS on the listener (rustls, ring): the server configuration built from `[tls]`, and the
//! identity a verified client certificate gives its connection (mutual TLS).
//!
//! The certificate is read once per connection, when it is set up (the listener's on-connect
//! callback): its subject's common name, or else its first subject alternative name, becomes
//! a [`ClientCertificate`] in the connection's extensions, where the perimeter finds it on every
//! request of that connection. Only certificates that chain to `tls.client_ca_file` get this
//! far: rustls refuses the others in the handshake.

use crate::config::{ClientAuth, ConfigError, TlsSettings};
use actix_web::dev::Extensions;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// The identity of a connection's verified client certificate.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// The subject's common name, or else the first subject alternative name.
    pub subject: Arc<str>,
}

/// The rustls configuration `[tls]` asks for, or `None` without TLS.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the setting whose file cannot be read or used.
pub fn server_config(settings: &TlsSettings) -> Result<Option<Arc<ServerConfig>>, ConfigError> {
    if !settings.enabled() {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&settings.cert_file, "tls.cert_file")?;
    let key = PrivateKeyDer::from_pem_file(&settings.key_file)
        .map_err(|e| invalid("tls.key_file", &settings.key_file, e))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Invalid(format!("tls: {e}")))?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Optional | ClientAuth::Required => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(&settings.client_ca_file, "tls.client_ca_file")? {
                roots
                    .add(ca)
                    .map_err(|e| invalid("tls.client_ca_file", &settings.client_ca_file, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if settings.client_auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| invalid("tls.client_ca_file", &settings.client_ca_file, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| invalid("tls.key_file", &settings.key_file, e))?;
    Ok(Some(Arc::new(config)))
}

fn certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid(setting, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(setting, path, e))?;
    if chain.is_empty() {
        return Err(invalid(setting, path, "no certificate in the file"));
    }
    Ok(chain)
}

fn invalid(setting: &str, path: &Path, error: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("{setting}: {}: {error}", path.display()))
}

/// The public listener's on-connect callback (`HttpServer::on_connect`'s signature), called
/// with a connection's stream as it is set up: for a TLS stream, puts the connection's
/// verified client certificate, if any, in its extensions; any other, nothing.
pub fn on_connect(connection: &dyn Any, extensions: &mut Extensions) {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    let Some(tls) = connection.downcast_ref::<Tls>() else {
        return;
    };
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    if let Some(subject) = leaf.and_then(|der| subject_of(der)) {
        extensions.insert(ClientCertificate { subject });
    }
}

/// The identity a certificate names: its subject's common name, or else its first subject
/// alternative name (DNS name, e-mail or URI).
pub fn subject_of(der: &[u8]) -> Option<Arc<str>> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let common_name = certificate
        .subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty());
    if let Some(cn) = common_name {
        return Some(Arc::from(cn));
    }
    let names = certificate.subject_alternative_name().ok()??;
    names
        .value
        .general_names
        .iter()
        .find_map(|name| match name {
            GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                Some(Arc::from(*s))
            }
            _ => None,
        })
}
