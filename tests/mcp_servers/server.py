"""Test MCP server for reactstep's integration tests, built on the official Python SDK (mcp==2.3.0).

    python server.py --transport http --port 0 [--legacy] [--ttl-ms N] [--require-header NAME=VALUE]
                     [--oauth [--oauth-reject] [--oauth-token-ttl SECONDS]]
    python server.py --transport stdio [--legacy] [--ttl-ms N]

Default mode is the SDK's dual-era server: 2026-07-28 (server/discover, per-request _meta,
input_required results) and the 2025-era initialize handshake. --legacy serves only the
handshake era (2025-11-25 and older), as a pre-2026 server would. --oauth puts /mcp behind
bearer tokens from an auto-approving authorization server in the same process. See NOTES.md.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import os
import secrets
import socket
import sys
import threading
import time
from typing import Annotated
from urllib.parse import parse_qsl

import anyio
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.caching import CacheHint
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import (
    AcceptedElicitation,
    CancelledElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.types import CallToolResult, TextContent, ToolAnnotations, ToolListChangedNotification
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.responses import JSONResponse

READ_ONLY = ToolAnnotations(read_only_hint=True)


class Sum(BaseModel):
    sum: int


class Confirmation(BaseModel):
    ok: bool
    note: str


def ask(action: str) -> Elicit[Confirmation]:
    """Resolver for confirm's `answer`: the SDK turns this into the era's elicitation."""
    return Elicit(f"Allow {action}?", Confirmation)


def build_server(ttl_ms: int, auth: AuthSettings | None = None, provider: MemoryAuthServer | None = None) -> MCPServer:
    mcp = MCPServer("reactstep-test-server", version="1.0.0", log_level="WARNING",
                    cache_hints={"tools/list": CacheHint(ttl_ms=ttl_ms)}, auth=auth, auth_server_provider=provider)
    low = mcp._lowlevel_server  # noqa: SLF001 - see NOTES.md ("listChanged on the handshake era")
    # Advertise tools.listChanged on handshake-era connections too (the 2026 era derives it itself).
    low.create_initialization_options = functools.partial(
        low.create_initialization_options, NotificationOptions(tools_changed=True)
    )

    @mcp.tool(annotations=READ_ONLY)
    def add(a: int, b: int) -> Sum:
        """Add two integers (structured output)."""
        return Sum(sum=a + b)

    @mcp.tool(annotations=READ_ONLY, structured_output=False)
    def confirm(action: str, answer: Annotated[ElicitationResult[Confirmation], Resolve(ask)]) -> str:
        """Ask the user to confirm an action (input_required in 2026-07-28, elicitation/create before)."""
        if isinstance(answer, AcceptedElicitation) and answer.data.ok:
            return f"confirmed {action}: {answer.data.note}"
        if isinstance(answer, CancelledElicitation):
            return f"cancelled {action}"
        return f"declined {action}"

    @mcp.tool(annotations=READ_ONLY)
    def fail(kind: str) -> CallToolResult:
        """kind=error: isError result; kind=raise: the tool raises; kind=die: the process exits mid-call."""
        if kind == "raise":
            raise RuntimeError("the tool raised on purpose")
        if kind == "die":
            os._exit(3)
        return CallToolResult(content=[TextContent(type="text", text="the tool failed on purpose")], is_error=True)

    grown: list[str] = []

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False), structured_output=False)
    async def grow(ctx: Context) -> str:
        """Add a new tool extra_N and announce the list change."""
        name = f"extra_{len(grown) + 1}"

        def extra() -> str:
            return name

        mcp.add_tool(extra, name=name, description=f"Added by grow call {len(grown) + 1}.",
                     annotations=READ_ONLY, structured_output=False)
        grown.append(name)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()  # reaches subscriptions/listen streams (the only 2026 channel)
        else:
            # sent on this tools/call's own response stream (HTTP), so no GET stream is needed
            await ctx.session.send_notification(ToolListChangedNotification(),
                                                related_request_id=ctx.request_context.request_id)
        return f"added {name}"

    return mcp


# ---------------------------------------------------------------- --oauth: an in-memory authorization server

OAUTH_SCOPE = "mcp"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class MemoryAuthServer(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """The SDK's authorization-server hooks, in memory. /authorize approves at once (or, with
    reject, denies at once); tokens are opaque random strings. The SDK's handlers do the protocol
    checks: client authentication, redirect_uri and scope validation, PKCE S256 at /token."""

    def __init__(self, resource: str, token_ttl: int, reject: bool) -> None:
        self.resource, self.token_ttl, self.reject = resource, token_ttl, reject
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        log(f"oauth: registered client {client_info.client_id} auth={client_info.token_endpoint_auth_method} "
            f"redirect_uris={[str(u) for u in client_info.redirect_uris or []]}")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if self.reject:
            log(f"oauth: /authorize client={client.client_id} -> access_denied (--oauth-reject)")
            raise AuthorizeError("access_denied", "authorization denied (server started with --oauth-reject)")
        if params.resource and params.resource.rstrip("/") != self.resource:
            raise AuthorizeError("invalid_target", f"unknown resource {params.resource}; this is {self.resource}")
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32), scopes=params.scopes or [OAUTH_SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource or self.resource)
        self.codes[code.code] = code
        log(f"oauth: /authorize client={client.client_id} scopes={code.scopes} -> approved, redirect with code")
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          code: AuthorizationCode) -> OAuthToken:
        del self.codes[code.code]  # single use
        return self._issue(client.client_id, code.scopes, code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        del self.refresh[refresh_token.token]  # rotated: the old refresh token is spent
        return self._issue(client.client_id, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)  # the SDK's bearer backend checks expires_at and resource

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = AccessToken(token=secrets.token_urlsafe(32), client_id=client_id, scopes=scopes,
                             expires_at=int(time.time()) + self.token_ttl, resource=resource)
        refresh = RefreshToken(token=secrets.token_urlsafe(32), client_id=client_id, scopes=scopes, resource=resource)
        self.access[access.token], self.refresh[refresh.token] = access, refresh
        return OAuthToken(access_token=access.token, token_type="Bearer", expires_in=self.token_ttl,
                          scope=" ".join(scopes), refresh_token=refresh.token)


def oauth_settings(base_url: str) -> AuthSettings:
    return AuthSettings(
        issuer_url=base_url, resource_server_url=f"{base_url}/mcp", validate_token_resource=True,
        required_scopes=[OAUTH_SCOPE],
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[OAUTH_SCOPE], default_scopes=[OAUTH_SCOPE]))


def token_request_log(app, provider: MemoryAuthServer):
    """One stderr line per POST /token: grant type, whether the PKCE verifier matches the code's
    S256 challenge, and the HTTP outcome. Never a token (error bodies carry none)."""

    async def logged(scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:  # buffer the form, then replay it to the SDK's handler
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        form = dict(parse_qsl(body.decode("latin-1")))
        pkce = "n/a"
        if form.get("grant_type") == "authorization_code":
            code = provider.codes.get(form.get("code", ""))
            verifier = form.get("code_verifier")
            if code is None or verifier is None:
                pkce = "unknown code" if code is None else "no code_verifier"
            else:
                digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                pkce = "verified" if digest == code.code_challenge else "FAILED"
        sent: dict[str, object] = {}

        async def replay():
            if not sent.get("replayed"):
                sent["replayed"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def capture(message):
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
            elif message["type"] == "http.response.body" and sent.get("status") != 200:
                sent["error"] = message.get("body", b"").decode("utf-8", "replace")
            await send(message)

        await app(scope, replay, capture)
        log(f"oauth: token request grant_type={form.get('grant_type')} pkce={pkce} -> "
            f"HTTP {sent.get('status')} {sent.get('error', '')}".rstrip())

    return logged


def legacy_http_gate(app, supported=HANDSHAKE_PROTOCOL_VERSIONS):
    """Refuse non-handshake MCP-Protocol-Version headers with 400, as pre-2026 SDK servers do."""

    async def gate(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/mcp":  # not the OAuth endpoints
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in supported:
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": (
                    f"Bad Request: Unsupported protocol version: {version}. "
                    f"Supported versions: {', '.join(supported)}")}}
                return await JSONResponse(body, status_code=400)(scope, receive, send)
        await app(scope, receive, send)

    return gate


def header_gate(app, name: str, value: str):
    """401 for every HTTP request that does not carry header NAME with exactly VALUE. The 401's
    body repeats what was sent, as careless servers do: a client must not print it back."""
    key = name.lower().encode("latin-1")

    async def gate(scope, receive, send):
        got = dict(scope["headers"]).get(key, b"").decode("latin-1") if scope["type"] == "http" else ""
        if scope["type"] == "http" and got != value:
            body = {"error": f"missing or wrong {name} header: got {got!r}"}
            return await JSONResponse(body, status_code=401)(scope, receive, send)
        await app(scope, receive, send)

    return gate


class AnnouncingServer(uvicorn.Server):
    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:  # lifespan done and the listening socket is accepting
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)


def run_http(args: argparse.Namespace) -> None:
    # Bind first: with --port 0 the OAuth URLs (issuer, resource) need the real port.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    provider = MemoryAuthServer(f"{base_url}/mcp", args.oauth_token_ttl, args.oauth_reject) if args.oauth else None
    mcp = build_server(args.ttl_ms, oauth_settings(base_url) if provider else None, provider)
    app = mcp.streamable_http_app()
    if provider:
        app = token_request_log(app, provider)
    if args.legacy:
        app = legacy_http_gate(app)
    if args.require_header:
        name, _, value = args.require_header.partition("=")
        app = header_gate(app, name, value)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_config=None, access_log=False,
                            log_level="warning", timeout_graceful_shutdown=2)
    server = AnnouncingServer(config)

    def exit_on_stdin_eof() -> None:
        while sys.stdin.buffer.read(65536):
            pass
        server.should_exit = True

    threading.Thread(target=exit_on_stdin_eof, daemon=True).start()
    server.run(sockets=[sock])  # uvicorn turns SIGTERM/SIGINT into a graceful exit


async def run_stdio(mcp: MCPServer, legacy: bool) -> None:
    if not legacy:
        await mcp.run_stdio_async()  # dual-era loop: the client's first request picks the era
        return
    low = mcp._lowlevel_server  # noqa: SLF001
    async with stdio_server() as (read, write), low.lifespan(low) as state:
        await serve_loop(low, read, write, lifespan_state=state)  # handshake-only loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", choices=["http", "stdio"], required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--legacy", action="store_true", help="speak only the 2025-11-25 handshake era")
    parser.add_argument("--ttl-ms", type=int, default=0, help="ttlMs on 2026-07-28 tools/list results")
    parser.add_argument("--require-header", metavar="NAME=VALUE", help="HTTP only: 401 without this header")
    parser.add_argument("--oauth", action="store_true",
                        help="HTTP only: /mcp needs a bearer token from this process's auto-approving OAuth server")
    parser.add_argument("--oauth-reject", action="store_true", help="with --oauth: /authorize denies (access_denied)")
    parser.add_argument("--oauth-token-ttl", type=int, default=3600, metavar="SECONDS",
                        help="with --oauth: access token lifetime (default 3600)")
    args = parser.parse_args()
    if args.require_header and ("=" not in args.require_header or args.transport != "http"):
        parser.error("--require-header takes NAME=VALUE and needs --transport http")
    if args.oauth and args.transport != "http":
        parser.error("--oauth needs --transport http")
    if args.oauth_reject and not args.oauth:
        parser.error("--oauth-reject needs --oauth")
    if args.transport == "http":
        run_http(args)
    else:
        anyio.run(run_stdio, build_server(args.ttl_ms), args.legacy)


if __name__ == "__main__":
    main()
