//! An HTTPS upstream on loopback, for the TLS tests and the load script: a certificate authority
//! made on the spot, a certificate for 127.0.0.1 signed by it, and hyper serving HTTP/2 or
//! HTTP/1.1 over rustls, whichever the client's ALPN asks for, as the providers' APIs do.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

pub struct HttpsUpstream {
    /// `https://127.0.0.1:<port>`
    pub uri: String,
    /// The certificate authority that signed the upstream's certificate, as PEM.
    pub ca_pem: String,
    /// The HTTP version of every request received, in order.
    pub versions: Arc<Mutex<Vec<hyper::Version>>>,
    /// Connections accepted, whether or not their TLS handshake then succeeded.
    pub connections: Arc<AtomicUsize>,
    /// How many of the next connections to close as soon as they are accepted.
    pub drop_next: Arc<AtomicUsize>,
    /// How every request's body was framed, in order.
    pub framings: Arc<Mutex<Vec<Framing>>>,
}

/// How a request's body came: the `Content-Length` it declared, whether it was sent in chunks
/// (HTTP/1.1's `Transfer-Encoding`), and the bytes that arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct Framing {
    pub content_length: Option<usize>,
    pub chunked: bool,
    pub received: usize,
}

impl Framing {
    fn of(headers: &hyper::HeaderMap, received: usize) -> Self {
        Self {
            content_length: headers
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok()),
            chunked: headers.contains_key(hyper::header::TRANSFER_ENCODING),
            received,
        }
    }
}

/// Serves every request with what `answer` makes of its body: a status and a JSON body, or
/// server-sent events (a body that begins `data:`).
/// `max_streams` is HTTP/2's limit on streams per connection, as a hosted provider's server sets
/// one; `None` allows any number, so that a burst measures the service, not the limit.
pub async fn start<F, Fut>(max_streams: Option<u32>, answer: F) -> HttpsUpstream
where
    F: Fn(Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = (u16, String)> + Send + 'static,
{
    start_offering(&[b"h2", b"http/1.1"], max_streams, answer).await
}

/// The same upstream, offering only the given ALPN protocols (`http/1.1` alone: a server, or a
/// TLS-inspecting proxy, that does not speak HTTP/2).
pub async fn start_offering<F, Fut>(
    protocols: &[&[u8]],
    max_streams: Option<u32>,
    answer: F,
) -> HttpsUpstream
where
    F: Fn(Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = (u16, String)> + Send + 'static,
{
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "reactstep test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    tls.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("https://{}", listener.local_addr().unwrap());
    let versions = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let drop_next = Arc::new(AtomicUsize::new(0));
    let framings = Arc::new(Mutex::new(Vec::new()));
    let records = Records {
        versions: versions.clone(),
        connections: connections.clone(),
        drop_next: drop_next.clone(),
        framings: framings.clone(),
    };
    tokio::spawn(serve(
        listener,
        TlsAcceptor::from(Arc::new(tls)),
        max_streams,
        answer,
        records,
    ));
    HttpsUpstream {
        uri,
        ca_pem: ca.pem(),
        versions,
        connections,
        drop_next,
        framings,
    }
}

/// What the server records, shared with the [`HttpsUpstream`] handle.
#[derive(Clone)]
struct Records {
    versions: Arc<Mutex<Vec<hyper::Version>>>,
    connections: Arc<AtomicUsize>,
    drop_next: Arc<AtomicUsize>,
    framings: Arc<Mutex<Vec<Framing>>>,
}

async fn serve<F, Fut>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    max_streams: Option<u32>,
    answer: F,
    records: Records,
) where
    F: Fn(Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = (u16, String)> + Send + 'static,
{
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        records.connections.fetch_add(1, Ordering::SeqCst);
        let dropped = records
            .drop_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if dropped.is_ok() {
            drop(socket);
            continue;
        }
        let (acceptor, answer, records) = (acceptor.clone(), answer.clone(), records.clone());
        tokio::spawn(async move {
            // A client that rejects the certificate ends the handshake: nothing to serve.
            let Ok(stream) = acceptor.accept(socket).await else {
                return;
            };
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let (answer, records) = (answer.clone(), records.clone());
                async move {
                    records.versions.lock().unwrap().push(request.version());
                    let (head, body) = request.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let framing = Framing::of(&head.headers, body.len());
                    records.framings.lock().unwrap().push(framing);
                    let (status, reply) = answer(body).await;
                    // A reply of server-sent events is one streamed call's whole answer.
                    let content_type = if reply.starts_with("data:") {
                        "text/event-stream"
                    } else {
                        "application/json"
                    };
                    let response = hyper::Response::builder()
                        .status(status)
                        .header("content-type", content_type)
                        .body(Full::new(Bytes::from(reply)))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            let mut server = auto::Builder::new(TokioExecutor::new());
            server.http2().max_concurrent_streams(max_streams);
            let _ = server.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
