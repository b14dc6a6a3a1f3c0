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

/// How long the person is given to sign in.
pub const SIGN_IN_PATIENCE: Duration = Duration::from_secs(300);

/// The most of a redirect's request that is read: its first line is all that is used.
const MAX_REDIRECT_BYTES: usize = 16 * 1024;

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
    eprintln!("The MCP server {shown} asks you to sign in. Open this address:\n{address}");
    let callback = tokio::time::timeout(patience, redirected(&listener, port))
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

/// The address the browser was sent back to, from the first request to `/callback`; a
/// refusal the authorization server sent instead (`error=access_denied`) is the error.
async fn redirected(listener: &TcpListener, port: u16) -> Result<String, String> {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(target) = request_target(&mut stream).await else {
            let _ = answer(&mut stream, "404 Not Found", "Not the sign-in address.").await;
            continue;
        };
        let url = format!("http://127.0.0.1:{port}{target}");
        let refused = Url::parse(&url).ok().and_then(|u| {
            u.query_pairs()
                .find(|(key, _)| key == "error")
                .map(|(_, value)| value.into_owned())
        });
        if let Some(error) = refused {
            let _ = answer(
                &mut stream,
                "200 OK",
                "The sign-in was refused; you may close this page.",
            )
            .await;
            return Err(format!(
                "the authorization server refused the sign-in ({error})"
            ));
        }
        let _ = answer(
            &mut stream,
            "200 OK",
            "reactstep is signed in; you may close this page.",
        )
        .await;
        return Ok(url);
    }
}

/// The target of a `GET /callback…` request, its head read within [`MAX_REDIRECT_BYTES`].
async fn request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    // The whole head is read, not just its first line: a socket closed with a request still
    // unread is reset, and the browser may lose the page it was answered.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REDIRECT_BYTES {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .ok()?
            .ok()?;
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

    async fn sent(request: &'static [u8]) -> (Result<String, String>, String) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let browser = tokio::spawn(async move {
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
        });
        let got = redirected(&listener, port).await;
        (got, browser.await.unwrap_or_default())
    }

    #[tokio::test]
    async fn the_callback_gives_its_address_and_a_refusal_is_an_error() {
        let (got, page) =
            sent(b"GET /callback?code=abc&state=xyz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(got.is_ok_and(|u| u.ends_with("/callback?code=abc&state=xyz")));
        assert!(
            page.starts_with("HTTP/1.1 200 OK") && page.contains("signed in"),
            "{page}"
        );
        let (got, _) = sent(b"GET /callback?error=access_denied&state=xyz HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            got,
            Err("the authorization server refused the sign-in (access_denied)".into())
        );
    }
}
