"""``memproxy mcp``: MCP over stdin/stdout for hosts that launch a command (Claude Desktop, Cursor,
most IDEs), forwarded to a running memproxy's ``/mcp`` over Streamable HTTP, so that server stays
the store's only writer and the tools, guards and tenant are its own.

Invariants:
- Stdout carries MCP messages only: the SDK's ``stdio_server`` points fd 1 at stderr while it
  serves, so a stray print or a library's warning cannot corrupt the protocol; diagnostics go
  to stderr.
- The credential comes from ``MEMPROXY_API_KEY`` (never a flag: flags show in ``ps`` and in
  the host's config file); the scope headers from ``--user-id`` / ``--agent-id`` /
  ``--session-id`` or ``MEMPROXY_USER_ID`` / ``MEMPROXY_AGENT_ID`` / ``MEMPROXY_SESSION_ID``.
- Messages are relayed as they are, both ways (the HTTP transport adds ``Mcp-Session-Id``);
  the bridge ends when the host closes stdin.
"""

from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlsplit, urlunsplit

KEY_ENV = "MEMPROXY_API_KEY"
_SCOPE = (
    ("user_id", "MEMPROXY_USER_ID", "X-Memproxy-User-Id"),
    ("agent_id", "MEMPROXY_AGENT_ID", "X-Memproxy-Agent-Id"),
    ("session_id", "MEMPROXY_SESSION_ID", "X-Memproxy-Session-Id"),
)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``memproxy mcp`` (called by ``cli.build_parser``)."""
    summary = "speak MCP on stdin/stdout, forwarded to a running memproxy's /mcp"
    command = sub.add_parser(
        "mcp",
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}. For MCP hosts that launch a command (Claude "
        f"Desktop, Cursor): the credential comes from ${KEY_ENV}, the memory's user from --user-id "
        "(or $MEMPROXY_USER_ID); stdout carries protocol messages only (docs/mcp.md).",
    )
    command.add_argument("--url", required=True,
                         help="the server's MCP endpoint, e.g. http://127.0.0.1:8080/mcp (a bare "
                         "http://HOST:PORT gets /mcp)")  # fmt: skip
    command.add_argument("--user-id", help="whose memory (X-Memproxy-User-Id; default $MEMPROXY_USER_ID)")
    command.add_argument(
        "--agent-id", help="which agent's memory (X-Memproxy-Agent-Id; default $MEMPROXY_AGENT_ID)"
    )
    command.add_argument("--session-id", help="recorded with new memories (default $MEMPROXY_SESSION_ID)")
    command.set_defaults(func=cmd_mcp)


def endpoint(url: str) -> str:
    """``url`` with ``/mcp`` as its path when it has none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--url must be an http(s) URL, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/mcp"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def request_headers(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {environ[KEY_ENV]}"}
    for field, env, header in _SCOPE:
        value = getattr(args, field, None) or environ.get(env)
        if value:
            headers[header] = value
    return headers


def cmd_mcp(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    if not environ.get(KEY_ENV, "").strip():
        print(f"memproxy mcp: set {KEY_ENV} to the key (or token) memproxy's /v1 routes accept",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        url = endpoint(args.url)
    except ValueError as exc:
        print(f"memproxy mcp: {exc}", file=sys.stderr)
        return 2
    import anyio  # the SDK's imports wait until they are needed: `memproxy --help` stays quick

    anyio.run(bridge, url, request_headers(args, environ))
    return 0


async def bridge(url: str, headers: dict[str, str]) -> None:
    """Relay MCP messages between this process's stdio and ``url`` until stdin closes."""
    import anyio
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with stdio_server() as (host_read, host_write):
        try:
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(url, http_client=http) as (server_read, server_write),
                anyio.create_task_group() as tasks,
            ):

                async def upward() -> None:
                    async for message in host_read:
                        if isinstance(message, Exception):
                            print(
                                f"memproxy mcp: unreadable message from the host: {message}", file=sys.stderr
                            )
                            continue
                        await server_write.send(message)
                    tasks.cancel_scope.cancel()  # the host closed stdin: end, closing the session

                async def downward() -> None:
                    async for message in server_read:
                        if isinstance(message, Exception):
                            print(f"memproxy mcp: {url}: {message}", file=sys.stderr)
                            continue
                        await host_write.send(message)

                tasks.start_soon(upward)
                tasks.start_soon(downward)
        finally:
            # stdio_server's writer task ends only when its stream is closed.
            await host_write.aclose()
