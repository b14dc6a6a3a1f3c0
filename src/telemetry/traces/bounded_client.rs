//! The exporter's HTTP client. The SDK's own blocking one reads a collector's whole reply into
//! memory: a collector that answered an export with an endless body took gigabytes and then the
//! process. This one reads at most [`MOST_REPLY_BYTES`] of a reply (a collector answers an export
//! with a few bytes of protobuf) and drops the rest with the connection. It follows no redirect.

use std::io::Read as _;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most of a collector's reply read.
pub const MOST_REPLY_BYTES: u64 = 64 * 1024;

/// A blocking reqwest client that reads replies within [`MOST_REPLY_BYTES`] and the export
/// timeout.
#[derive(Debug)]
pub struct BoundedClient {
    client: reqwest::blocking::Client,
    /// The whole export's: reqwest's own bounds each read, and a reply dripped a byte at a
    /// time never trips it.
    timeout: Duration,
}

impl BoundedClient {
    /// With the export timeout of the standard variables (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`,
    /// then `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds; 10 s otherwise), as the SDK's own.
    pub fn new() -> Result<Self, String> {
        Self::with_timeout(export_timeout(|name| std::env::var(name).ok()))
    }

    fn with_timeout(timeout: Duration) -> Result<Self, String> {
        // A blocking client cannot be built on a thread that runs an async runtime.
        let built = std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()
        })
        .join()
        .map_err(|_| "the trace exporter's HTTP client could not be built".to_string())?;
        let client = built.map_err(|e| e.to_string())?;
        Ok(Self { client, timeout })
    }
}

/// The export timeout the standard variables set.
fn export_timeout(var: impl Fn(&str) -> Option<String>) -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| var(name)?.trim().parse().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

#[async_trait::async_trait]
impl HttpClient for BoundedClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let deadline = std::time::Instant::now() + self.timeout;
        let request: reqwest::blocking::Request = request.try_into()?;
        let mut response = self.client.execute(request)?.error_for_status()?;
        let headers = std::mem::take(response.headers_mut());
        let status = response.status();
        let mut body = Vec::new();
        let mut reply = response.by_ref().take(MOST_REPLY_BYTES);
        let mut piece = [0u8; 8192];
        loop {
            let read = reply.read(&mut piece)?;
            if read == 0 {
                break;
            }
            body.extend_from_slice(&piece[..read]);
            if std::time::Instant::now() > deadline {
                return Err("the collector's reply did not end within the export timeout".into());
            }
        }
        let mut reply = Response::builder().status(status).body(Bytes::from(body))?;
        *reply.headers_mut() = headers;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A collector on loopback that answers one export with its head, then with `pieces` of
    /// `piece` bytes, `every` apart, until the client hangs up. Its URL.
    fn collector(piece: usize, pieces: usize, every: Duration) -> String {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut head = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut head);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\r\n");
            let bytes = vec![b'x'; piece];
            for _ in 0..pieces {
                if stream.write_all(&bytes).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        });
        format!("http://{address}/v1/traces")
    }

    /// One export to `url`; a blocking client's future is ready at its first poll.
    fn export(client: &BoundedClient, url: String) -> Result<Response<Bytes>, HttpError> {
        let request = Request::post(url)
            .body(Bytes::from_static(b"spans"))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut sent = client.send_bytes(request);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match sent.as_mut().poll(&mut context) {
            std::task::Poll::Ready(reply) => reply,
            std::task::Poll::Pending => panic!("the blocking client's future was not ready"),
        }
    }

    /// A collector that answers an export with an endless body: the client reads the bound and
    /// no more (the SDK's read it all, gigabytes, until the process died).
    #[test]
    fn a_collectors_endless_reply_is_read_to_the_bound() {
        // Up to 4 GiB, until the client hangs up.
        let url = collector(1 << 20, 4096, Duration::ZERO);
        let client = BoundedClient::new().unwrap_or_else(|e| panic!("{e}"));
        let reply = export(&client, url).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status(), 200);
        assert_eq!(reply.body().len() as u64, MOST_REPLY_BYTES);
    }

    /// A reply dripped a byte at a time, each read within reqwest's own timeout: the export
    /// still ends at its timeout, with an error (it held the exporter for hours before).
    #[test]
    fn a_dripped_reply_ends_at_the_export_timeout() {
        let url = collector(1, 10_000, Duration::from_millis(50));
        let client = BoundedClient::with_timeout(Duration::from_millis(300))
            .unwrap_or_else(|e| panic!("{e}"));
        let failed = export(&client, url).err().map(|e| e.to_string());
        assert_eq!(
            failed.as_deref(),
            Some("the collector's reply did not end within the export timeout")
        );
    }

    #[test]
    fn the_timeout_is_the_traces_own_then_the_exporters_then_ten_seconds() {
        fn set(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
            move |name| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        }
        const BOTH: [(&str, &str); 2] = [
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ];
        assert_eq!(export_timeout(set(&BOTH)), Duration::from_millis(1500));
        assert_eq!(
            export_timeout(set(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "3000")])),
            Duration::from_millis(3000)
        );
        assert_eq!(export_timeout(set(&[])), Duration::from_secs(10));
        let bad = set(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]);
        assert_eq!(export_timeout(bad), Duration::from_secs(10));
    }
}
