"""Drive server.py in every mode with the SDK's own client (mcp==2.3.0) and assert each behaviour.

    .venv/bin/python check.py [--capture wire.json]

Modes: http modern, http legacy, http oauth, stdio modern, stdio legacy. Exits non-zero on the
first failure. --capture writes the raw 2026-07-28 HTTP exchanges (discover, tools/list, the
confirm input_required round and its retry), the legacy server's answers to server/discover, and
the --oauth server's 401, metadata documents, /register, /authorize redirect and /token answers.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlparse

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, OAuthFlowError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import ElicitRequest, ElicitResult, InputRequiredResult, ToolListChangedNotification

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = [sys.executable, os.path.join(HERE, "server.py")]
MODERN, LEGACY = "2026-07-28", "2025-11-25"
TTL_MS = 1000
TOKEN = ("X-Reactstep-Token", "s3cret")
CALLBACK = "http://127.0.0.1:8976/callback"  # the client's loopback redirect URI; never connected to here
CAPTURE: dict[str, Any] = {}
TIMINGS: dict[str, float] = {}


def ok(msg: str) -> None:
    print(f"  ok  {msg}", flush=True)


# ---------------------------------------------------------------- server processes


class HttpServer:
    """server.py --transport http, started the way the Rust tests will start it."""

    def __init__(self, *flags: str, stderr: Any = None) -> None:
        self.flags, self.stderr = flags, stderr

    async def __aenter__(self) -> HttpServer:
        t0 = time.monotonic()
        self.proc = subprocess.Popen([*SERVER, "--transport", "http", "--port", "0", *self.flags],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        self.startup_s = time.monotonic() - t0
        assert line.startswith("LISTENING http://127.0.0.1:") and line.endswith("/mcp\n"), repr(line)
        self.url = line.split()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the documented way to stop it
        rc = await anyio.to_thread.run_sync(lambda: self.proc.wait(15))
        rest = self.proc.stdout.read()
        assert rest == "", f"stdout must hold only the LISTENING line, got {rest!r}"
        self.rc = rc


def stdio_params(*flags: str) -> StdioServerParameters:
    return StdioServerParameters(command=SERVER[0], args=[SERVER[1], "--transport", "stdio", *flags])


# ---------------------------------------------------------------- SDK client scenario


@dataclass
class Recorder:
    """Client-side callbacks: the elicitation answer to give, and what the server sent us."""

    answer: tuple[str, dict[str, Any] | None] = ("accept", {"ok": True, "note": "ship it"})
    elicitations: list[tuple[Any, Any]] = field(default_factory=list)
    list_changed: anyio.Event = field(default_factory=anyio.Event)

    async def elicit(self, context, params):
        self.elicitations.append((context.request_id, params))
        action, content = self.answer
        return ElicitResult(action=action, content=content)

    async def on_message(self, message) -> None:
        if isinstance(message, ToolListChangedNotification):
            self.list_changed.set()


def http_client_for(url: str, rec: Recorder, *, token: bool = False, mode: str = "auto") -> Client:
    headers = dict([TOKEN]) if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=30,
                  elicitation_callback=rec.elicit, message_handler=rec.on_message)


def stdio_client_for(params: StdioServerParameters, rec: Recorder, *, mode: str = "auto") -> Client:
    return Client(params, mode=mode, read_timeout_seconds=30,
                  elicitation_callback=rec.elicit, message_handler=rec.on_message)


def text(result) -> str:
    return result.content[0].text


async def scenario(client: Client, rec: Recorder, modern: bool) -> None:
    """Everything except fail(kind="die"), against one connected client."""
    # negotiation
    s = client.session
    if modern:
        assert client.protocol_version == MODERN, client.protocol_version
        assert s.discover_result is not None and s.initialize_result is None
        assert MODERN in s.discover_result.supported_versions
        ok(f"server/discover negotiated {client.protocol_version}")
    else:
        assert client.protocol_version == LEGACY, client.protocol_version
        assert s.initialize_result is not None and s.discover_result is None
        ok(f"fell back to initialize, negotiated {client.protocol_version}")
    assert client.server_capabilities.tools.list_changed is True
    ok("tools.listChanged advertised")

    # tools/list: annotations, output schema, cache hint
    listing = await client.list_tools()
    tools = {t.name: t for t in listing.tools}
    assert set(tools) == {"add", "confirm", "fail", "grow"}, set(tools)
    for name in ("add", "confirm", "fail"):
        assert tools[name].annotations.read_only_hint is True, name
    assert tools["grow"].annotations.read_only_hint is False
    assert tools["grow"].annotations.destructive_hint is False
    assert tools["add"].output_schema["properties"]["sum"]["type"] == "integer"
    ok("tools/list: 4 tools, readOnlyHint on add/confirm/fail, grow readOnly=false destructive=false")
    if modern:
        assert listing.ttl_ms == TTL_MS and listing.cache_scope == "private", (listing.ttl_ms, listing.cache_scope)
        ok(f"tools/list ttlMs={listing.ttl_ms} cacheScope={listing.cache_scope}")
    else:
        assert "ttl_ms" not in listing.model_fields_set, listing.ttl_ms  # the model has a default; the wire had none
        ok("tools/list carries no ttlMs (2025-11-25)")

    # add: structured output
    r = await client.call_tool("add", {"a": 2, "b": 40})
    assert not r.is_error and r.structured_content == {"sum": 42}, r
    ok("add(2, 40) -> structuredContent {'sum': 42}")

    # confirm: four outcomes through the elicitation callback
    cases = [(("accept", {"ok": True, "note": "ship it"}), "confirmed deploy: ship it"),
             (("accept", {"ok": False, "note": "no"}), "declined deploy"),
             (("decline", None), "declined deploy"),
             (("cancel", None), "cancelled deploy")]
    for answer, expected in cases:
        rec.answer = answer
        r = await client.call_tool("confirm", {"action": "deploy"})
        assert not r.is_error and text(r) == expected, (answer, r)
    req_id, params = rec.elicitations[-1]
    assert params.mode == "form" and params.message == "Allow deploy?"
    props = params.requested_schema["properties"]
    assert props["ok"]["type"] == "boolean" and props["note"]["type"] == "string"
    if modern:
        # the SDK client resolved an input_required result: the callback context carries the inputRequests key
        assert req_id == "__main__:ask", req_id
        first = await s.call_tool("confirm", {"action": "deploy"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.request_state
        (key, ireq), = first.input_requests.items()
        assert isinstance(ireq, ElicitRequest) and ireq.method == "elicitation/create"
        again = await client.call_tool("confirm", {"action": "deploy"}, request_state=first.request_state,
                                       input_responses={key: ElicitResult(action="accept",
                                                                          content={"ok": True, "note": "manual"})})
        assert text(again) == "confirmed deploy: manual", again
        ok("confirm: input_required result (elicitation/create, form) -> retry with inputResponses+requestState")
    else:
        assert isinstance(req_id, int), req_id  # a real server->client JSON-RPC request
        ok("confirm: classic elicitation/create server->client request (form)")
    ok("confirm: accept/ok=true, accept/ok=false, decline, cancel -> confirmed/declined/declined/cancelled")

    # fail: error and raise (die is exercised separately, it ends the server)
    r = await client.call_tool("fail", {"kind": "error"})
    assert r.is_error and text(r) == "the tool failed on purpose", r
    r = await client.call_tool("fail", {"kind": "raise"})
    assert r.is_error and text(r) == "Error executing tool fail", r
    ok("fail(error) -> isError 'the tool failed on purpose'; fail(raise) -> isError 'Error executing tool fail'")

    # grow: the list changes; the change is announced the way the revision allows
    r = await client.call_tool("grow", {})
    assert text(r) == "added extra_1", r
    if modern:
        # The list is fresh for ttlMs: the wait is the hint's own time passing, after which the
        # SDK's client must list again (how soon it would have, under load, is not asserted).
        await anyio.sleep(TTL_MS / 1000 + 0.2)
        fresh = await client.list_tools()
        assert "extra_1" in {t.name for t in fresh.tools}
        ok(f"grow -> extra_1 listed once the {TTL_MS} ms of ttlMs have passed")
        async with client.listen(tools_list_changed=True) as sub:
            assert sub.honored.tools_list_changed
            await client.call_tool("grow", {})
            with anyio.fail_after(10):
                event = await sub.__anext__()
            assert type(event).__name__ == "ToolsListChanged", event
        names = {t.name for t in (await client.list_tools()).tools}
        assert "extra_2" in names, names
        ok("grow -> ToolsListChanged on subscriptions/listen; re-list shows extra_2")
    else:
        with anyio.fail_after(10):
            await rec.list_changed.wait()
        names = {t.name for t in (await client.list_tools()).tools}
        assert "extra_1" in names, names
        r = await client.call_tool("extra_1", {})
        assert text(r) == "extra_1", r
        ok("grow -> notifications/tools/list_changed; re-list shows extra_1 (and it is callable)")


def describe(e: BaseException) -> str:
    """The leaf errors of a (possibly nested) exception group, as one line."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(sorted({describe(x) for x in e.exceptions}))
    return f"{type(e).__name__}: {e}"


async def expect_death(client: Client) -> str:
    """Call fail(kind="die"); the server exits mid-call, so the call (or the connection) must fail."""
    try:
        async with client:
            with anyio.fail_after(30):
                r = await client.call_tool("fail", {"kind": "die"})
    except BaseException as e:  # noqa: BLE001 - an ExceptionGroup from the transport is the usual shape
        if isinstance(e, AssertionError) or not isinstance(e, (Exception, BaseExceptionGroup)):
            raise
        return describe(e)
    raise AssertionError(f"fail(die) answered: {r}")


# ---------------------------------------------------------------- modes


async def http_mode(legacy: bool) -> None:
    flags = ("--legacy",) if legacy else ()
    label = "http legacy" if legacy else "http modern"
    print(f"[{label}]", flush=True)
    async with HttpServer(*flags, "--ttl-ms", str(TTL_MS)) as srv:
        TIMINGS[f"{label} start->LISTENING"] = srv.startup_s
        rec = Recorder()
        async with http_client_for(srv.url, rec) as client:
            await scenario(client, rec, modern=not legacy)
        if not legacy:
            async with http_client_for(srv.url, Recorder(), mode="legacy") as client:
                assert client.protocol_version == LEGACY
                assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"sum": 2}
            ok("the default server also serves a mode='legacy' (initialize) client")
        await raw_http_probe(srv.url, legacy)
        outcome = await expect_death(http_client_for(srv.url, Recorder()))
    assert srv.rc == 3, srv.rc
    ok(f"fail(die): client got {outcome[:80]!r}; server exited with code 3")

    async with HttpServer(*flags, "--require-header", "=".join(TOKEN)) as srv:
        async with httpx2.AsyncClient() as raw:
            resp = await raw.post(srv.url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
            assert resp.status_code == 401, resp.status_code
        async with http_client_for(srv.url, Recorder(), token=True) as client:
            assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"sum": 3}
        try:
            async with http_client_for(srv.url, Recorder()) as client:
                raise AssertionError("connected without the required header")
        except (MCPError, Exception) as e:  # noqa: BLE001
            assert not isinstance(e, AssertionError), e
            refused = describe(e)
        srv.proc.terminate()  # SIGTERM must end it too
    assert srv.rc in (0, -15), srv.rc
    ok(f"--require-header: raw POST -> 401, client with header works, without -> {refused[:70]!r}; SIGTERM stops it")


async def stdio_mode(legacy: bool) -> None:
    flags = ("--legacy",) if legacy else ()
    label = "stdio legacy" if legacy else "stdio modern"
    print(f"[{label}]", flush=True)
    rec = Recorder()
    t0 = time.monotonic()
    async with stdio_client_for(stdio_params(*flags, "--ttl-ms", str(TTL_MS)), rec) as client:
        TIMINGS[f"{label} spawn->connected"] = time.monotonic() - t0
        await scenario(client, rec, modern=not legacy)
    outcome = await expect_death(stdio_client_for(stdio_params(*flags), Recorder()))
    ok(f"fail(die): client got {outcome[:80]!r}")
    await raw_stdio_probe(legacy)


# ---------------------------------------------------------------- OAuth (--oauth)


@dataclass
class MemoryTokenStorage:
    """The SDK's TokenStorage protocol, in memory; keeps every token set it was given."""

    tokens: list[OAuthToken] = field(default_factory=list)
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@dataclass
class Browser:
    """Stands in for the user's browser: GETs the authorization URL and reads (does not follow)
    the 302 to the client's loopback callback, then hands code/state back to the SDK."""

    locations: list[str] = field(default_factory=list)

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:  # httpx2 does not follow redirects by default
            resp = await http.get(authorization_url)
        assert resp.status_code == 302, (resp.status_code, resp.text)
        self.locations.append(resp.headers["location"])

    async def callback(self) -> AuthorizationCodeResult:
        location = self.locations[-1]
        assert location.startswith(CALLBACK + "?"), location
        query = dict(parse_qsl(urlparse(location).query))
        if "error" in query:  # RFC 6749 §4.1.2.1: what a real callback listener must turn into an error
            raise OAuthFlowError(f"authorization failed: {query['error']}: {query.get('error_description', '')}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def oauth_client_for(url: str, storage: MemoryTokenStorage, browser: Browser, *, mode: str = "auto") -> Client:
    auth = OAuthClientProvider(url, OAuthClientMetadata(client_name="check.py", redirect_uris=[CALLBACK]),
                               storage, redirect_handler=browser.open, callback_handler=browser.callback)
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=30)


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def redacted(body: Any) -> Any:
    """A JSON body or query dict with credentials replaced by their length, for --capture."""
    secret = {"access_token", "refresh_token", "code", "client_secret", "code_verifier"}
    if isinstance(body, dict):
        return {k: f"<{len(v)} chars>" if k in secret and isinstance(v, str) else redacted(v) for k, v in body.items()}
    return body


async def raw_oauth_probe(url: str, ttl: int) -> list[str]:
    """The whole flow by hand, as a client without the SDK does it. Returns every credential issued."""
    base = url.removesuffix("/mcp")
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": envelope()}
    mcp_headers = {"Accept": "application/json, text/event-stream", "Mcp-Method": "server/discover",
                   "MCP-Protocol-Version": MODERN}
    async with httpx2.AsyncClient(timeout=30) as raw:
        r = await raw.post(url, json=discover, headers=mcp_headers)
        prm_url = f"{base}/.well-known/oauth-protected-resource/mcp"
        www = r.headers.get("www-authenticate", "")
        assert r.status_code == 401 and www.startswith("Bearer ") and f'resource_metadata="{prm_url}"' in www, (
            r.status_code, r.headers)
        CAPTURE["oauth_401"] = {"status": r.status_code, "www-authenticate": www, "body": r.json()}
        ok(f"no token: POST /mcp -> 401, WWW-Authenticate: {www[:60]}... resource_metadata=<PRM URL>")

        prm = (await raw.get(prm_url)).json()
        assert prm["resource"] == url and prm["authorization_servers"] == [base] and prm["scopes_supported"] == ["mcp"]
        asm = (await raw.get(f"{base}/.well-known/oauth-authorization-server")).json()
        assert asm["issuer"] == base and asm["code_challenge_methods_supported"] == ["S256"], asm
        for name, path in [("authorization", "/authorize"), ("token", "/token"), ("registration", "/register")]:
            assert asm[f"{name}_endpoint"] == base + path, asm
        CAPTURE.update(oauth_protected_resource_metadata=prm, oauth_authorization_server_metadata=asm)
        ok("PRM (RFC 9728) and AS metadata (RFC 8414): issuer, /authorize, /token, /register, S256, scope mcp")

        reg_body = {"client_name": "raw", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none",
                    "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}
        reg = await raw.post(asm["registration_endpoint"], json=reg_body)
        assert reg.status_code == 201 and "client_secret" not in reg.json(), (reg.status_code, reg.text)
        client_id = reg.json()["client_id"]
        CAPTURE["oauth_register"] = {"request": reg_body, "response": {"status": 201, "body": reg.json()}}

        verifier = secrets.token_urlsafe(48)
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": CALLBACK, "state": "st-123",
                  "code_challenge": s256(verifier), "code_challenge_method": "S256", "scope": "mcp", "resource": url}
        a = await raw.get(asm["authorization_endpoint"], params=params)
        location = a.headers.get("location", "")
        query = dict(parse_qsl(urlparse(location).query))
        assert a.status_code == 302 and location.startswith(CALLBACK + "?code=") and query.keys() == {"code", "state"}
        assert query["state"] == "st-123", query
        CAPTURE["oauth_authorize"] = {"request_query": redacted(params), "status": 302,
                                      "location": location.replace(query["code"], "<code>")}
        ok(f"public client registered; GET /authorize -> 302 {CALLBACK}?code=…&state=st-123")

        form = {"grant_type": "authorization_code", "code": query["code"], "redirect_uri": CALLBACK,
                "client_id": client_id, "code_verifier": secrets.token_urlsafe(48), "resource": url}
        bad = await raw.post(asm["token_endpoint"], data=form)
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant", bad.text
        good = await raw.post(asm["token_endpoint"], data={**form, "code_verifier": verifier})
        tok = good.json()
        assert good.status_code == 200 and tok["token_type"] == "Bearer" and tok["scope"] == "mcp", good.text
        assert tok["expires_in"] == ttl and tok["refresh_token"], tok
        reused = await raw.post(asm["token_endpoint"], data={**form, "code_verifier": verifier})
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text
        CAPTURE["oauth_token"] = {"request": redacted(form), "wrong_verifier": {"status": 400, "body": bad.json()},
                                  "response": {"status": 200, "headers": {k: good.headers[k] for k in (
                                      "content-type", "cache-control")}, "body": redacted(tok)},
                                  "code_reused": {"status": 400, "body": reused.json()}}
        ok(f"/token: wrong code_verifier -> 400 {bad.json()['error_description']!r}; right one -> Bearer "
           f"(scope mcp, expires_in {ttl}, refresh_token); code reuse -> 400 invalid_grant")

        bearer = {**mcp_headers, "Authorization": f"Bearer {tok['access_token']}"}
        r = await raw.post(url, json=discover, headers=bearer)
        assert r.status_code == 200 and r.json()["result"]["supportedVersions"] == [MODERN], r.text
        nope = await raw.post(url, json=discover, headers={**mcp_headers, "Authorization": "Bearer not-a-token"})
        assert nope.status_code == 401, nope.status_code
        refresh = {"grant_type": "refresh_token", "refresh_token": tok["refresh_token"], "client_id": client_id}
        new = await raw.post(asm["token_endpoint"], data=refresh)
        old = await raw.post(asm["token_endpoint"], data=refresh)
        assert new.status_code == 200 and new.json()["access_token"] != tok["access_token"], new.text
        assert old.status_code == 400 and old.json()["error"] == "invalid_grant", old.text
        CAPTURE["oauth_refresh"] = {"request": redacted(refresh), "response": redacted(new.json()),
                                    "old_refresh_token_again": {"status": 400, "body": old.json()}}
        ok("Bearer token -> discover 200; unknown token -> 401; refresh rotates (old refresh token -> 400)")
        return [tok["access_token"], tok["refresh_token"], new.json()["access_token"], new.json()["refresh_token"],
                query["code"], verifier]


async def oauth_mode() -> None:
    print("[http oauth]", flush=True)
    ttl = 2  # the expires_in the token endpoint must state
    with tempfile.TemporaryFile("w+") as log:
        async with HttpServer("--oauth", "--oauth-token-ttl", str(ttl), stderr=log) as srv:
            TIMINGS["http oauth start->LISTENING"] = srv.startup_s
            issued = await raw_oauth_probe(srv.url, ttl)

            storage, browser = MemoryTokenStorage(), Browser()
            t0 = time.monotonic()
            async with oauth_client_for(srv.url, storage, browser) as client:
                TIMINGS["http oauth SDK client 401->authorized->connected"] = time.monotonic() - t0
                assert client.protocol_version == MODERN and len(browser.locations) == 1
                assert {t.name for t in (await client.list_tools()).tools} == {"add", "confirm", "fail", "grow"}
                assert (await client.call_tool("add", {"a": 2, "b": 40})).structured_content == {"sum": 42}
                ok("SDK OAuthClientProvider: 401 -> PRM -> AS metadata -> register -> authorize -> token; "
                   "tools listed, add(2, 40) = 42")
        log.seek(0)
        logged = log.read()
    lines = [line for line in logged.splitlines() if "token request" in line]
    assert "grant_type=authorization_code pkce=FAILED -> HTTP 400" in lines[0], lines
    assert lines[1].endswith("grant_type=authorization_code pkce=verified -> HTTP 200"), lines
    assert any("grant_type=refresh_token pkce=n/a -> HTTP 200" in line for line in lines), lines
    issued += [c for t in storage.tokens for c in (t.access_token, t.refresh_token)]
    assert not [c for c in issued if c in logged], "a credential reached the server log"
    ok(f"server log: one line per token request ({len(lines)}), grant type and PKCE result, no credentials")

    async with HttpServer("--oauth", "--legacy") as srv:
        async with oauth_client_for(srv.url, MemoryTokenStorage(), Browser()) as client:
            assert client.protocol_version == LEGACY
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"sum": 2}
    ok("--oauth --legacy: the SDK client authorizes and falls back to initialize (2025-11-25)")

    async with HttpServer("--oauth", "--oauth-reject") as srv:
        browser = Browser()
        try:
            async with oauth_client_for(srv.url, MemoryTokenStorage(), browser) as client:
                raise AssertionError("connected although /authorize denied access")
        except Exception as e:  # noqa: BLE001
            assert not isinstance(e, AssertionError), e
            refused = describe(e)
        query = dict(parse_qsl(urlparse(browser.locations[-1]).query))
        assert query["error"] == "access_denied" and query["state"] and "code" not in query, query
        assert "access_denied" in refused, refused
        CAPTURE["oauth_reject_location"] = browser.locations[-1]
    ok(f"--oauth-reject: /authorize -> 302 callback?error=access_denied&…&state=…; client: {refused[:90]!r}")


# ---------------------------------------------------------------- raw wire probes


def envelope(**extra: Any) -> dict[str, Any]:
    return {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                      "io.modelcontextprotocol/clientInfo": {"name": "check.py", "version": "0"},
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}, **extra}


async def raw_http_probe(url: str, legacy: bool) -> None:
    """Hand-built 2026-07-28 POSTs, as a client without the SDK sends them."""
    async with httpx2.AsyncClient(timeout=30) as raw:
        async def post(body: dict[str, Any], name: str | None = None, version: str | None = MODERN):
            headers = {"Accept": "application/json, text/event-stream", "Mcp-Method": body["method"]}
            if version:
                headers["MCP-Protocol-Version"] = version
            if name:
                headers["Mcp-Name"] = name
            resp = await raw.post(url, json=body, headers=headers)
            return {"request": {"headers": headers, "body": body},
                    "response": {"status": resp.status_code, "content-type": resp.headers.get("content-type"),
                                 "body": resp.json() if resp.content else None}}

        discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": envelope()}
        if legacy:
            probe = await post(discover)
            assert probe["response"]["status"] == 400, probe
            CAPTURE["legacy_http_discover"] = probe
            ok(f"raw: legacy server answers server/discover with HTTP 400 {probe['response']['body']['error']}")
            return
        d = await post(discover)
        res = d["response"]["body"]["result"]
        assert res["supportedVersions"] == [MODERN] and res["resultType"] == "complete", res
        tl = await post({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": envelope()})
        assert tl["response"]["body"]["result"]["ttlMs"] == TTL_MS
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": envelope(name="confirm", arguments={"action": "deploy"})}
        r1 = await post(call, name="confirm")
        res1 = r1["response"]["body"]["result"]
        assert res1["resultType"] == "input_required", res1
        (key, ireq), = res1["inputRequests"].items()
        assert ireq["method"] == "elicitation/create" and ireq["params"]["mode"] == "form", ireq
        retry = {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                 "params": envelope(name="confirm", arguments={"action": "deploy"},
                                    inputResponses={key: {"action": "accept", "content": {"ok": True, "note": "go"}}},
                                    requestState=res1["requestState"])}
        r2 = await post(retry, name="confirm")
        res2 = r2["response"]["body"]["result"]
        assert res2["resultType"] == "complete" and res2["content"][0]["text"] == "confirmed deploy: go", res2
        tampered = json.loads(json.dumps(retry))
        tampered["id"] = 5
        tampered["params"]["requestState"] = res1["requestState"][:-4] + "AAAA"
        r3 = await post(tampered, name="confirm")
        CAPTURE.update(modern_discover=d, modern_tools_list=tl, modern_confirm_round1=r1,
                       modern_confirm_retry=r2, modern_confirm_tampered_state=r3)
        ok("raw: discover / tools/list(ttlMs) / tools/call -> input_required -> retry -> complete")


async def raw_stdio_probe(legacy: bool) -> None:
    """Newline-delimited JSON-RPC over a bare pipe: era answers and the die exit code."""
    t0 = time.monotonic()
    flags = ["--legacy"] if legacy else []
    proc = await anyio.open_process([*SERVER, "--transport", "stdio", *flags])
    async with proc:
        buf = b""

        async def rpc(msg: dict[str, Any] | None) -> dict[str, Any] | None:
            """Send msg (if any); return the next message from the server unless msg is a notification."""
            nonlocal buf
            if msg is not None:
                await proc.stdin.send((json.dumps(msg) + "\n").encode())
                if "id" not in msg:
                    return None
            while b"\n" not in buf:
                chunk = await proc.stdout.receive()
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            return json.loads(line)

        with anyio.fail_after(30):
            d = await rpc({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": envelope()})
            TIMINGS[f"stdio {'legacy' if legacy else 'modern'} spawn->first answer"] = time.monotonic() - t0
            if legacy:
                assert d["error"]["code"] == -32601, d
                CAPTURE["legacy_stdio_discover"] = d
                init = await rpc({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
                    "protocolVersion": MODERN, "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "raw", "version": "0"}}})
                assert init["result"]["protocolVersion"] == LEGACY, init
                await rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
                ok(f"raw: legacy stdio answers server/discover with {d['error']}; initialize(2026) -> {LEGACY}")
                call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": "confirm", "arguments": {"action": "deploy"}}}
                ask = await rpc(call)
                assert ask["method"] == "elicitation/create" and ask["params"]["mode"] == "form", ask
                answer = {"jsonrpc": "2.0", "id": ask["id"],
                          "result": {"action": "accept", "content": {"ok": True, "note": "go"}}}
                await proc.stdin.send((json.dumps(answer) + "\n").encode())
                done = await rpc(None)
                assert done["id"] == 3 and done["result"]["content"][0]["text"] == "confirmed deploy: go", done
                CAPTURE["legacy_stdio_confirm"] = [call, ask, answer, done]
                ok("raw: legacy confirm = tools/call -> elicitation/create request -> our result -> tools/call result")
                die = {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                       "params": {"name": "fail", "arguments": {"kind": "die"}}}
            else:
                assert d["result"]["supportedVersions"] == [MODERN], d
                die = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                       "params": envelope(name="fail", arguments={"kind": "die"})}
            await proc.stdin.send((json.dumps(die) + "\n").encode())
            rc = await proc.wait()
        rest = buf + b"".join([c async for c in proc.stdout])
        assert rc == 3 and rest == b"", (rc, rest)
        ok("raw: fail(die) -> no answer, exit code 3")


async def main(capture: str | None) -> None:
    await http_mode(legacy=False)
    await http_mode(legacy=True)
    await oauth_mode()
    await stdio_mode(legacy=False)
    await stdio_mode(legacy=True)
    print("timings:", {k: round(v, 2) for k, v in TIMINGS.items()})
    if capture:
        with open(capture, "w") as f:
            json.dump(CAPTURE, f, indent=2)
        print(f"wire captures written to {capture}")
    print("ALL CHECKS PASSED")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--capture", metavar="FILE")
    anyio.run(main, parser.parse_args().capture)
