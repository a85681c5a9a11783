"""The ``memproxy`` command: ``serve`` and the operator tools."""

from __future__ import annotations

import argparse
import faulthandler
import os
import re
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from memproxy import __version__
from memproxy.commands.mcp_stdio import add_command as add_mcp_command
from memproxy.config import ConfigError, Settings, find_config_path, load_settings


def load(args: argparse.Namespace) -> Settings:
    path = find_config_path(getattr(args, "config", None), dict(os.environ))
    settings = load_settings(path)
    if getattr(args, "host", None):
        settings.server.host = args.host
    if getattr(args, "port", None) is not None:
        settings.server.port = args.port
    return settings


def dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's stack to stderr: how to see where a process hangs."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def check_embedder(settings: Settings) -> None:
    """A missing model directory or package is a config error now, not a traceback at start."""
    from memproxy.index.embedder import make_embedder

    make_embedder(settings.embedding, settings.upstream)


def check_data_dir(settings: Settings) -> None:
    """Fail in one line, before anything starts, if the data dir cannot be written.

    Otherwise SQLite fails inside the app's start-up and the user gets uvicorn's traceback;
    the usual cause is a bind-mounted host directory the container's user does not own.
    """
    if getattr(settings.storage, "url", None):
        return  # a database server holds the data; the data dir only holds index snapshots
    from memproxy.storage.database import database_path

    data_dir = Path(settings.storage.data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=data_dir, prefix=".memproxy-write-check-"):
            pass
        database = database_path(data_dir)
        if database.exists() and not os.access(database, os.R_OK | os.W_OK):
            raise PermissionError(f"cannot read and write {database}")
    except OSError as exc:
        raise ConfigError(
            f"data dir {data_dir} is not writable by this process (uid {os.getuid()}): {exc}. "
            "With a bind mount, run the container as the directory's owner "
            '(docker run --user "$(id -u):$(id -g)" …) or chown it to that uid; '
            "or choose another storage.data_dir (MEMPROXY_STORAGE__DATA_DIR)."
        ) from None


def check_storage(settings: Settings) -> None:
    """With ``storage.url`` set, the database must answer at start (else exit 2 naming the key)."""
    if not settings.storage.url:
        return
    import psycopg

    from memproxy.storage.postgres import check_reachable

    try:
        check_reachable(settings.storage.url)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"storage.url: cannot use the database: {reason}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from memproxy.commands.serve import BindError, bind_port, quiet_library_loaders, run_server

    settings = load(args)
    if getattr(args, "workers", None) is not None:
        settings.server.workers = args.workers
    workers = settings.server.workers
    if args.offline and workers > 1:
        raise ConfigError("--offline serves from one process: leave out --workers and server.workers")
    try:  # before the checks and the load below, which take seconds
        listener = bind_port(settings.server, workers)
    except BindError as exc:
        raise ConfigError(str(exc)) from None
    with listener:
        check_storage(settings)
        check_embedder(settings)

        from memproxy.api.access_log import configure_logging

        check_data_dir(settings)
        configure_logging(settings.server)
        quiet_library_loaders()
        dump_stacks_on_sigusr1()
        if not args.offline:
            return run_server(settings, workers, listener)
        from memproxy.commands.offline import offline_upstream

        with offline_upstream(settings):
            return run_server(settings, 1, listener)


def cmd_fake_upstream(args: argparse.Namespace) -> int:
    from memproxy.api.access_log import configure_logging
    from memproxy.commands.offline import run_fake_upstream
    from memproxy.config import ServerSettings

    configure_logging(ServerSettings())
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    return run_fake_upstream(args.host, args.port)


def cmd_worker(args: argparse.Namespace) -> int:
    """Only the extraction worker, on the same data dir as a ``serve`` (whose worker may be off)."""
    import asyncio

    from memproxy.api.access_log import configure_logging
    from memproxy.commands.serve import quiet_library_loaders
    from memproxy.services import run_worker_process

    settings = load(args)
    check_storage(settings)
    check_data_dir(settings)
    configure_logging(settings.server)
    quiet_library_loaders()
    dump_stacks_on_sigusr1()
    asyncio.run(run_worker_process(settings))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from memproxy.commands.demo import run_demo

    return run_demo()


def config_source(args: argparse.Namespace) -> str:
    """Which configuration a command used, for messages that must say where they looked."""
    path = find_config_path(getattr(args, "config", None), dict(os.environ))
    if path is not None:
        return f"config: {path}"
    return "config: none found (looked for --config, $MEMPROXY_CONFIG, ./config.yaml), built-in defaults"


def _operator_error(args: argparse.Namespace, exc: Exception) -> int:
    print(f"memproxy: {exc}\n  ({config_source(args)})", file=sys.stderr)
    return 2


def cmd_reindex(args: argparse.Namespace) -> int:
    import asyncio

    from memproxy.memory.maintenance import OperatorError, reindex

    try:
        result = asyncio.run(reindex(load(args), args.scope))
    except OperatorError as exc:
        return _operator_error(args, exc)
    print(f"reindexed {result.memories} memories in {result.scopes} scope(s); re-embedded {result.reembedded}; "
          f"removed {result.orphan_snapshots_removed} orphan snapshot(s)", file=sys.stderr)  # fmt: skip
    return 0


def describe_tenants(counts: list[tuple[str, int]], shown: int = 10) -> str:
    """``alpha (12 memories, logged as tenant=3b1e0c9a77d2), …`` for messages."""
    if not counts:
        return "none (this database holds no memories)"
    parts = [f"{tenant} ({n} memories, logged as tenant={tenant_log_hash(tenant)})" for tenant, n in counts]
    more = f", and {len(parts) - shown} more (memproxy tenant lists them all)" if len(parts) > shown else ""
    return ", ".join(parts[:shown]) + more


def tenant_log_hash(tenant: str) -> str:
    from memproxy.auth import Credential

    return Credential(tenant=tenant, provider_key=None).tenant_hash


def cmd_export(args: argparse.Namespace) -> int:
    import asyncio

    from memproxy.memory.maintenance import OperatorError, export_jsonl, tenant_counts

    settings = load(args)
    try:
        data, count = asyncio.run(export_jsonl(settings, args.tenant, args.user_id, args.agent_id))
    except OperatorError as exc:
        return _operator_error(args, exc)
    if args.out and args.out != "-":
        Path(args.out).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    where = "".join(f" {flag}={value}" for flag, value in (("user_id", args.user_id), ("agent_id", args.agent_id))
                    if value is not None)  # fmt: skip
    print(f"exported {count} memories of tenant {args.tenant}{where}", file=sys.stderr)
    if count:
        return 0
    counts = asyncio.run(tenant_counts(settings))
    if args.tenant in dict(counts):
        return 0  # the tenant exists; the filter selected nothing
    print(f"memproxy: tenant {args.tenant!r} has no memories in {settings.storage.data_dir}. "
          f"Known tenants: {describe_tenants(counts)}. In passthrough mode a token's tenant is "
          "`memproxy tenant --token <token>`.", file=sys.stderr)  # fmt: skip
    return 1


def cmd_tenant(args: argparse.Namespace) -> int:
    """With ``--token``: the tenant the server derives from it (stdout) and how logs show it.
    Without: every tenant of the data dir with its memory count."""
    import asyncio

    from memproxy.auth import Authenticator
    from memproxy.errors import ApiError
    from memproxy.memory.maintenance import OperatorError, tenant_counts

    settings = load(args)
    if args.token is None:
        try:
            counts = asyncio.run(tenant_counts(settings))
        except OperatorError as exc:
            return _operator_error(args, exc)
        for tenant, n in counts:
            print(f"{tenant}\t{n} memories\ttenant={tenant_log_hash(tenant)}")
        if not counts:
            print(f"no tenant has memories in {settings.storage.data_dir}", file=sys.stderr)
        return 0
    token = sys.stdin.readline().strip() if args.token == "-" else args.token
    try:
        credential = Authenticator(settings.auth).authenticate(f"Bearer {token}")
    except ApiError as exc:
        print(f"memproxy: {exc.message} (auth.mode is {settings.auth.mode})", file=sys.stderr)
        return 2
    print(credential.tenant)
    print(f"auth.mode {settings.auth.mode}; access log lines show it as tenant={credential.tenant_hash}",
          file=sys.stderr)  # fmt: skip
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    import asyncio

    from memproxy.memory.maintenance import OperatorError, import_jsonl, require_database
    from memproxy.memory.transfer import ImportRefused

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        print(f"memproxy: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    settings = load(args)
    unreachable = unreachable_tenant(settings, args.tenant)
    try:
        require_database(settings)  # a wrong folder is the first thing to say
        if unreachable:
            print(f"memproxy: warning: {unreachable}; importing anyway", file=sys.stderr)
        result = asyncio.run(import_jsonl(settings, args.tenant, raw))
    except OperatorError as exc:
        return _operator_error(args, exc)
    except ImportRefused as exc:
        name = "stdin" if args.file == "-" else args.file
        bad = f"{len(exc.problems)} bad line{'s' if len(exc.problems) > 1 else ''}"
        print(f"memproxy: {name}: {bad}, nothing imported (fix them and run it again):", file=sys.stderr)
        for number, message, _ in exc.problems:
            print(f"  line {number}: {message}", file=sys.stderr)
        return 2
    print(f"imported {result['imported']}, skipped {result['skipped']} into tenant {args.tenant}",
          file=sys.stderr)  # fmt: skip
    return 0


# The tenant ``auth.passthrough_tenant`` derives from any token.
_PASSTHROUGH_TENANT = re.compile(r"^pt_[0-9a-f]{40}$")


def unreachable_tenant(settings: Settings, tenant: str) -> str | None:
    """Why no client of this config could read ``tenant``'s memories, or None if one can."""
    auth = settings.auth
    if auth.mode == "passthrough":
        if _PASSTHROUGH_TENANT.match(tenant):
            return None
        return (f"no token reaches tenant {tenant!r}: in auth.mode passthrough a token's tenant is pt_ and "
                "40 hex characters (`memproxy tenant --token <token>` prints it)")  # fmt: skip
    tenants = sorted({entry.tenant for entry in auth.keys})
    if tenant in tenants:
        return None
    return f"no key reaches tenant {tenant!r}: auth.mode is keys and auth.keys name {', '.join(tenants) or 'none'}"


def cmd_migrate_to(args: argparse.Namespace) -> int:
    import psycopg

    from memproxy.config import StorageSettings
    from memproxy.storage.sqlite_to_postgres import MigrateError, migrate_to

    settings = load(args)
    try:
        StorageSettings(url=args.url)  # the same URL rules as storage.url
    except ValueError as exc:
        raise ConfigError(f"migrate-to URL: {str(exc).splitlines()[-1].strip()}") from None
    try:
        result = migrate_to(settings.storage.data_dir, args.url)
    except MigrateError as exc:
        print(f"memproxy: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        print(
            f"memproxy: cannot use the target database: {str(exc).strip().splitlines()[0]}", file=sys.stderr
        )
        return 2
    copied = ", ".join(f"{n} {table}" for table, n in result.rows.items())
    print(f"copied {copied} into Postgres; now set storage.url to it", file=sys.stderr)
    return 0


CONFIG_HELP = "path to config.yaml (default: $MEMPROXY_CONFIG, then ./config.yaml)"
TENANT_HELP = ("the tenant id, not a token: in auth.mode passthrough a token's tenant is pt_ and 40 hex "
               "characters (`memproxy tenant --token <token>` prints it); in keys mode an auth.keys "
               "entry's tenant")  # fmt: skip


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str, description: str
) -> argparse.ArgumentParser:
    """A subcommand: ``summary`` in ``memproxy --help``'s list, ``description`` in its own ``--help``."""
    return sub.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {description}")


def _add_operator_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """reindex/export/import: work on the data dir of the config directly (see ``maintenance``)."""
    reindex = _command(sub, "reindex", "rebuild index snapshots from the database (with a progress bar)",
                       "Re-embeds memories stored by another embedder, rebuilds each scope's index and "
                       "writes its snapshot; safe while the server runs. Without --scope it also deletes "
                       "snapshots of scopes that hold no memory.")  # fmt: skip
    reindex.add_argument("--scope", help="only this scope key (a snapshot file's name without .faiss)")
    reindex.set_defaults(func=cmd_reindex)
    export = _command(sub, "export", "write a tenant's memories as JSON Lines",
                      "One memory per line, in the format `memproxy import` and POST /v1/memories/import "
                      "read; vectors are not exported (an import re-embeds).")  # fmt: skip
    export.add_argument("--tenant", required=True, help=TENANT_HELP)
    export.add_argument("--user-id", help="only this user's memories (the X-Memproxy-User-Id a client sent)")
    export.add_argument(
        "--agent-id", help="only this agent's memories (the X-Memproxy-Agent-Id a client sent)"
    )
    export.add_argument("--out", help="output file (default: stdout)")
    export.set_defaults(func=cmd_export)
    imp = _command(sub, "import", "import JSON Lines into a tenant (texts are re-embedded)",
                   "All or nothing: a file with a bad line (not JSON, a missing field, a text the "
                   "guards refuse) imports nothing and every bad line is listed by its line number in "
                   "the file. Lines whose id or text the tenant already has are skipped. Needs the "
                   "server's data dir (it never creates one).")  # fmt: skip
    imp.add_argument("--tenant", required=True, help=TENANT_HELP)
    imp.add_argument("file", help="JSON Lines file, or - for stdin")
    imp.set_defaults(func=cmd_import)
    move = _command(sub, "migrate-to", "copy the SQLite data dir's database into an empty Postgres database",
                    "Then set storage.url to the same URL; the SQLite file is left as it was.")  # fmt: skip
    move.add_argument(
        "url", help="postgresql://user:pass@host:5432/db (must hold no memories, messages or jobs)"
    )
    move.set_defaults(func=cmd_migrate_to)

    tenant = _command(sub, "tenant", "the tenant of a token as the server and its log see it",
                      "With --token: the tenant id (stdout) the server derives from it, the one export "
                      "and import take. Without: every tenant of the database with its memory "
                      "count.")  # fmt: skip
    tenant.add_argument("--token", help="a bearer token (- reads it from stdin, out of shell history)")
    tenant.set_defaults(func=cmd_tenant)
    for command in (reindex, export, imp, tenant, move):
        command.add_argument("--config", help=CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memproxy", description="OpenAI-compatible proxy with long-term memory"
    )
    parser.add_argument("--version", action="version", version=f"memproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = _command(sub, "serve", "run the proxy",
                     "OpenAI (chat, Responses), Anthropic Messages and the memory API on one port; "
                     "settings from config.yaml and MEMPROXY_* variables, --host/--port over "
                     "both.")  # fmt: skip
    serve.add_argument("--config", help=CONFIG_HELP)
    serve.add_argument(
        "--host", help="address to listen on (default: server.host, 127.0.0.1; 0.0.0.0 for all)"
    )
    serve.add_argument(
        "--port", type=int, help="port to listen on (default: server.port, 8080; 0 picks a free one)"
    )
    serve.add_argument("--offline", action="store_true",
                       help="no provider key needed: model calls go to the bundled scripted stand-in")  # fmt: skip
    serve.add_argument(
        "--workers",
        type=int,
        help="processes serving one port on the same data dir (default: server.workers, 1)",
    )
    serve.set_defaults(func=cmd_serve)
    fake = _command(sub, "fake-upstream", "run the scripted OpenAI-compatible stand-in for a provider",
                    "What serve --offline runs inside itself, alone: point a memproxy at it with "
                    "MEMPROXY_UPSTREAM__API_BASE=http://HOST:PORT/v1.")  # fmt: skip
    fake.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    fake.add_argument("--port", type=int, default=9999, help="port to listen on (default: 9999)")
    fake.set_defaults(func=cmd_fake_upstream)
    demo = _command(sub, "demo", "offline demo: a memory captured in one chat, recalled in the next",
                    "Needs no key, config or network: a throwaway data dir and the scripted "
                    "stand-in.")  # fmt: skip
    demo.set_defaults(func=cmd_demo)
    worker = _command(sub, "worker", "run only the extraction worker (same data dir as serve)",
                      "For a deployment whose serve processes run with "
                      "extraction.worker_enabled false.")  # fmt: skip
    worker.add_argument("--config", help=CONFIG_HELP)
    worker.set_defaults(func=cmd_worker)
    _add_operator_commands(sub)
    add_mcp_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"memproxy: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
