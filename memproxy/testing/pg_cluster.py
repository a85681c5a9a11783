"""A throwaway Postgres server for tests, benches and CI: initdb into a temp dir, pg_ctl start.

Uses the server binaries of Debian's ``postgresql`` package (``/usr/lib/postgresql/*/bin``)
or whatever ``initdb`` is on PATH. Postgres refuses to run as root, so as root the cluster
directory is given to the ``postgres`` user and every server command runs through
``runuser -u postgres``. The server listens on 127.0.0.1 only, trusts local connections,
and runs with fsync off: it holds test data, nothing else.

    python -m memproxy.testing.pg_cluster start [--port P]   # prints the admin URL
    python -m memproxy.testing.pg_cluster stop DIR
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from memproxy.testing.background_server import free_port

SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "'64MB'",
}


def server_bindir() -> Path | None:
    """Directory holding ``initdb`` and ``pg_ctl``; the newest Debian version wins."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class PostgresCluster:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @classmethod
    def start(cls, port: int | None = None) -> PostgresCluster:
        bindir = server_bindir()
        if bindir is None:
            raise RuntimeError("no Postgres server binaries (apt-get install postgresql)")
        root = Path(tempfile.mkdtemp(prefix="memproxy-pg-"))
        cluster = cls(root, port or free_port())
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        run = _as_server_user
        subprocess.run(
            run([str(bindir / "initdb"), "-D", str(cluster.data), "-U", "postgres", "--auth=trust",
                 "--no-sync", "-E", "UTF8", "--locale=C"]),
            check=True, capture_output=True,
        )  # fmt: skip
        settings = {**SERVER_SETTINGS, "port": str(cluster.port), "unix_socket_directories": f"'{root}'"}
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        subprocess.run(run(["sh", "-c", f"cat >> {cluster.data / 'postgresql.conf'}"]), input=conf.encode(),
                       check=True, capture_output=True)  # fmt: skip
        cluster.start_server()
        return cluster

    def start_server(self) -> None:
        """(Re)start the server of this cluster; returns once it accepts connections."""
        self.pg_ctl("-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop_server(self) -> None:
        """Stop the server (fast shutdown), keeping the cluster for ``start_server``."""
        self.pg_ctl("-m", "fast", "-w", "stop")

    def pg_ctl(self, *args: str) -> None:
        bindir = server_bindir()
        assert bindir is not None
        # Output to a file, not a pipe: the server inherits pg_ctl's stdout and outlives it.
        with (self.root / "pg_ctl.out").open("ab") as out:
            subprocess.run(
                _as_server_user([str(bindir / "pg_ctl"), "-D", str(self.data), *args]),
                check=True, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def stop(self, remove: bool = True) -> None:
        try:
            self.pg_ctl("-m", "immediate", "-w", "stop")
        finally:
            if remove:
                shutil.rmtree(self.root, ignore_errors=True)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pg_cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start")
    start.add_argument("--port", type=int)
    stop = sub.add_parser("stop")
    stop.add_argument("dir")
    args = parser.parse_args(argv)
    if args.command == "start":
        cluster = PostgresCluster.start(args.port)
        print(f"MEMPROXY_TEST_PG_URL={cluster.url()} MEMPROXY_TEST_PG_DIR={cluster.root}")
        return 0
    PostgresCluster(Path(args.dir), 0).stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
