"""Test MCP server for reactstep's integration tests, built on the official Python SDK (mcp==2.3.0).

    python server.py --transport http --port 0 [--legacy] [--ttl-ms N] [--require-header NAME=VALUE]
    python server.py --transport stdio [--legacy] [--ttl-ms N]

Default mode is the SDK's dual-era server: 2026-07-28 (server/discover, per-request _meta,
input_required results) and the 2025-era initialize handshake. --legacy serves only the
handshake era (2025-11-25 and older), as a pre-2026 server would. See NOTES.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from typing import Annotated

import anyio
import uvicorn
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


def build_server(ttl_ms: int) -> MCPServer:
    mcp = MCPServer("reactstep-test-server", version="1.0.0", log_level="WARNING",
                    cache_hints={"tools/list": CacheHint(ttl_ms=ttl_ms)})
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


def legacy_http_gate(app, supported=HANDSHAKE_PROTOCOL_VERSIONS):
    """Refuse non-handshake MCP-Protocol-Version headers with 400, as pre-2026 SDK servers do."""

    async def gate(scope, receive, send):
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in supported:
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": (
                    f"Bad Request: Unsupported protocol version: {version}. "
                    f"Supported versions: {', '.join(supported)}")}}
                return await JSONResponse(body, status_code=400)(scope, receive, send)
        await app(scope, receive, send)

    return gate


def header_gate(app, name: str, value: str):
    """401 for every HTTP request that does not carry header NAME with exactly VALUE."""
    key = name.lower().encode("latin-1")

    async def gate(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(key) != value.encode("latin-1"):
            return await JSONResponse({"error": f"missing or wrong {name} header"}, status_code=401)(
                scope, receive, send)
        await app(scope, receive, send)

    return gate


class AnnouncingServer(uvicorn.Server):
    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:  # lifespan done and the listening socket is accepting
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)


def run_http(mcp: MCPServer, args: argparse.Namespace) -> None:
    app = mcp.streamable_http_app()
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
    server.run()  # uvicorn turns SIGTERM/SIGINT into a graceful exit


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
    args = parser.parse_args()
    if args.require_header and ("=" not in args.require_header or args.transport != "http"):
        parser.error("--require-header takes NAME=VALUE and needs --transport http")
    mcp = build_server(args.ttl_ms)
    if args.transport == "http":
        run_http(mcp, args)
    else:
        anyio.run(run_stdio, mcp, args.legacy)


if __name__ == "__main__":
    main()
