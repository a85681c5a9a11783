"""The ``memproxy`` command: ``serve`` and the operator tools."""

from __future__ import annotations

import argparse
import math
import os
import signal
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

    from memproxy.access_log import configure_logging
    from memproxy.app import create_app

    settings = load(args)
    configure_logging(settings.server)
    # uvicorn re-raises the SIGTERM it handled once shutdown is done, which would end the
    # process with -SIGTERM; a clean, graceful shutdown should exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level="warning",
        timeout_graceful_shutdown=math.ceil(settings.server.shutdown_grace_s),
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from memproxy.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memproxy", description="OpenAI-compatible proxy with long-term memory")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help="path to config.yaml")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(func=cmd_serve)
    demo = sub.add_parser("demo", help="offline demo: a memory captured in one chat, recalled in the next")
    demo.set_defaults(func=cmd_demo)
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
