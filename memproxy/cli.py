"""The ``memproxy`` command: ``serve`` and the operator tools."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memproxy.config import ConfigError, Settings, find_config_path, load_settings


def load(args: argparse.Namespace) -> Settings:
    path = find_config_path(getattr(args, "config", None), dict(os.environ))
    settings = load_settings(path)
    if getattr(args, "host", None):
        settings.server.host = args.host
    if getattr(args, "port", None) is not None:
        settings.server.port = args.port
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from memproxy.app import create_app

    settings = load(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level="warning",
        timeout_graceful_shutdown=int(settings.server.shutdown_grace_s) or None,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memproxy", description="OpenAI-compatible proxy with long-term memory")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help="path to config.yaml")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"memproxy: {exc}", file=sys.stderr)
        return 2
    return code


def data_dir(settings: Settings) -> Path:
    return settings.storage.data_dir


if __name__ == "__main__":
    sys.exit(main())
