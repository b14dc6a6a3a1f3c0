//! Signing in to an HTTP MCP server that requires OAuth (MCP's authorization: the server's 401
//! names its protected resource metadata; the SDK finds the authorization server, registers
//! reactstep as a client, and runs the authorization-code flow with PKCE). The person opens the
//! address printed on stderr; the authorization server sends their browser back to a one-shot
//! listener on a loopback port, whose code the SDK exchanges for a token. The token lives in
//! memory only: never printed, never in the report.

use std::time::Duration;

use reqwest::Url;
use rmcp::transport::auth::{AuthClient, AuthorizationManager, AuthorizationRequest, OAuthState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::driver::terminal::printable;

/// How long the person is given to sign in.
pub const SIGN_IN_PATIENCE: Duration = Duration::from_secs(300);

/// The most of a redirect's request that is read: its first line is all that is used.
const MAX_REDIRECT_BYTES: usize = 16 * 1024;

/// How long one connection to the listener may take to send its request's head.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// An HTTP client of the SDK's transport that sends the signed-in token, refreshing it.
pub type SignedIn = AuthClient<reqwest_mcp::Client>;

/// Signs in to the server at `url` (shown to the person as `shown`); `challenge` is the server's
/// `WWW-Authenticate`, which names where its authorization is described.
pub async fn sign_in(
    url: &Url,
    shown: &str,
    challenge: Option<&str>,
    patience: Duration,
) -> Result<SignedIn, String> {
    let failed =
        |e: &dyn std::fmt::Display| format!("signing in to the MCP server {shown} failed: {e}");
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed(&e))?;
    let port = listener.local_addr().map_err(|e| failed(&e))?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut state = OAuthState::new(url.as_str(), None)
        .await
        .map_err(|e| failed(&e))?;
    let mut request = AuthorizationRequest::new(&redirect).with_client_name("reactstep");
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    state
        .start_authorization(request)
        .await
        .map_err(|e| failed(&e))?;
    let address = state
        .get_authorization_url()
        .await
        .map_err(|e| failed(&e))?;
    let expected = openable(&address).map_err(|e| failed(&e))?;
    eprintln!("The MCP server {shown} asks you to sign in. Open this address:\n{address}");
    let callback = tokio::time::timeout(patience, redirected(listener, port, expected))
        .await
        .map_err(|_| {
            failed(&format!(
                "no sign-in came back within {} s",
                patience.as_secs()
            ))
        })??;
    state
        .handle_callback_url(&callback)
        .await
        .map_err(|e| failed(&e))?;
    let manager: AuthorizationManager = state
        .into_authorization_manager()
        .ok_or_else(|| failed(&"the sign-in did not complete"))?;
    eprintln!("Signed in to the MCP server {shown}.");
    Ok(AuthClient::new(reqwest_mcp::Client::new(), manager))
}

/// The `state` of an authorization address a person may open: https, or http on a loopback
/// host (never `javascript:`, `file:` or the like a server could name).
fn openable(address: &str) -> Result<String, String> {
    let url = Url::parse(address).map_err(|_| "the authorization address cannot be read")?;
    // `host_str` keeps an IPv6 address's brackets.
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !(url.scheme() == "https" || (url.scheme() == "http" && loopback)) {
        return Err("the authorization server named an address that is not https: refused".into());
    }
    url.query_pairs()
        .find(|(key, _)| key == "state")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| "the authorization address carries no state".into())
}

/// What one request to the listener came to: not the sign-in's (answered, ignored), or the
/// sign-in's redirect (its address), or its refusal.
type Redirect = Option<Result<String, String>>;

/// The address the browser was sent back to: the first request to `/callback` whose `state`
/// is this sign-in's. Requests are served side by side, each within a deadline, so neither an
/// idle connection nor a forged redirect (another state) holds up or ends the sign-in; a
/// refusal the authorization server sent (`error=access_denied`) with the right state is the
/// error.
async fn redirected(listener: TcpListener, port: u16, state: String) -> Result<String, String> {
    let (found, mut redirects) = tokio::sync::mpsc::channel::<Result<String, String>>(1);
    let state = std::sync::Arc::new(state);
    let serving = async {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (found, state) = (found.clone(), state.clone());
            tokio::spawn(async move {
                if let Some(redirect) = serve(stream, port, &state).await {
                    let _ = found.send(redirect).await;
                }
            });
        }
    };
    tokio::select! {
        redirect = redirects.recv() => redirect.unwrap_or_else(|| Err("the listener stopped".into())),
        () = serving => Err("the listener stopped".into()),
    }
}

/// Serves one connection within [`HEAD_DEADLINE`].
async fn serve(mut stream: TcpStream, port: u16, state: &str) -> Redirect {
    let target = tokio::time::timeout(HEAD_DEADLINE, request_target(&mut stream))
        .await
        .ok()
        .flatten();
    let Some(target) = target else {
        let _ = answer(&mut stream, "404 Not Found", "Not the sign-in address.").await;
        return None;
    };
    let url = Url::parse(&format!("http://127.0.0.1:{port}{target}")).ok()?;
    let field = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    if field("state").as_deref() != Some(state) {
        let _ = answer(
            &mut stream,
            "400 Bad Request",
            "Not this sign-in's redirect.",
        )
        .await;
        return None;
    }
    if let Some(error) = field("error") {
        let _ = answer(
            &mut stream,
            "200 OK",
            "The sign-in was refused; you may close this page.",
        )
        .await;
        let error = printable(&error);
        return Some(Err(format!(
            "the authorization server refused the sign-in ({error})"
        )));
    }
    let _ = answer(
        &mut stream,
        "200 OK",
        "reactstep has the sign-in; you may close this page.",
    )
    .await;
    Some(Ok(url.to_string()))
}

/// The target of a `GET /callback…` request, its head read within [`MAX_REDIRECT_BYTES`].
async fn request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    // The whole head is read, not just its first line: a socket closed with a request still
    // unread is reset, and the browser may lose the page it was answered.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REDIRECT_BYTES {
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.lines().next()?.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    (method == "GET" && target.starts_with("/callback")).then(|| target.to_string())
}

async fn answer(stream: &mut TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A browser's request to `port`, and the page it was answered.
    async fn browse(port: u16, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(request)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut page = String::new();
        let _ = stream.read_to_string(&mut page).await;
        page
    }

    /// The listener for a sign-in whose state is `xyz`, with an idle connection held open and a
    /// forged redirect (another state) sent before `request`; what it came to, and the pages.
    async fn sent(request: &'static [u8]) -> (Result<String, String>, String, String) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let waiting = tokio::spawn(redirected(listener, port, "xyz".into()));
        let _idle = TcpStream::connect(("127.0.0.1", port)).await;
        let forged = browse(
            port,
            b"GET /callback?error=access_denied&state=evil HTTP/1.1\r\n\r\n",
        )
        .await;
        let page = browse(port, request).await;
        let got = waiting.await.unwrap_or_else(|e| panic!("{e}"));
        (got, forged, page)
    }

    #[test]
    fn only_an_https_or_loopback_address_with_a_state_is_opened() {
        let state = openable("https://auth.example/authorize?state=abc&x=1");
        assert_eq!(state.as_deref(), Ok("abc"));
        assert!(openable("http://127.0.0.1:9/authorize?state=s").is_ok());
        assert!(openable("http://[::1]:9/authorize?state=s").is_ok());
        for refused in [
            "http://auth.example/authorize?state=s",
            "javascript:alert(1)//?state=s",
            "file:///etc/passwd?state=s",
            "https://auth.example/authorize",
        ] {
            assert!(openable(refused).is_err(), "{refused}");
        }
    }

    #[tokio::test]
    async fn the_callback_gives_its_address_and_a_refusal_is_an_error() {
        let (got, forged, page) =
            sent(b"GET /callback?code=abc&state=xyz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(got.is_ok_and(|u| u.ends_with("/callback?code=abc&state=xyz")));
        assert!(forged.starts_with("HTTP/1.1 400"), "{forged}");
        assert!(
            page.starts_with("HTTP/1.1 200 OK") && page.contains("has the sign-in"),
            "{page}"
        );
        let (got, _, _) =
            sent(b"GET /callback?error=access_denied&state=xyz HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            got,
            Err("the authorization server refused the sign-in (access_denied)".into())
        );
    }
}
