"""The process's Spark session, and the translation of Spark errors into ``SinkError``.

Theory of operation
-------------------
wal2delta uses one ``SparkSession`` per process (docs/architecture.md, Spark), built from
``SparkSettings``:

* ``embedded`` (default): a Sail Spark Connect server (``pysail``) runs inside this
  process, bound to 127.0.0.1 on a free port, and the session connects to it over Spark
  Connect. ``stop_spark_session`` stops the session and then the server.
* ``connect``: a remote Spark Connect server at ``SparkSettings.url``.
* ``classic``: a local JVM (the ``classic`` extra: pyspark, delta-spark, and a JRE) with
  the Delta jars already on its classpath - the ``-jre`` image copies them into
  ``pyspark/jars`` at build time. ``classic_session_conf`` builds the session settings
  from the jars present and never asks Spark to resolve packages from Maven at start; with
  the jars missing it fails with a ``SinkError`` that says how to get them. The tests
  check the settings and the builder calls; starting the JVM itself is not exercised.

Spark sessions are created with ``builder.create()``, never ``getOrCreate()``: a Spark
Connect builder would hand back a session that is already open to another server.

The session time zone defaults to UTC. wal2delta ships timestamps with an explicit schema
(instants as ``TIMESTAMP``, wall-clock values as ``TIMESTAMP_NTZ``), so values do not
depend on it, but anything rendered by Spark itself (casts, logs) is then unambiguous.

Errors: every call into Spark from ``sink`` runs inside ``engine_errors``, the one place
where pyspark, Spark Connect (gRPC), py4j and Sail errors become ``SinkError`` subclasses
(the httpcore ``map_exceptions`` pattern). Connectivity and concurrent-commit failures are
retryable; data errors (casts, overflow, invalid values) are ``SinkDataError``; anything
else is a terminal ``SinkError``. The engine's message is never copied into ours - it may
quote row values - but stays attached as ``__cause__``.

Object-store faults are ``SinkStoreError`` (retryable, with its own bound at the
supervisor, decision 0115): Sail and delta-rs reach the lake through the ``object_store``
crate, which retries a failed request itself (10 times within about 2-4 s) and then
reports ``Generic S3 error: Error performing PUT <url> ... - Server returned non-2xx status
code: 503 Service Unavailable: <S3's XML body>`` (or ``HTTP error: error sending request``
for a reset or refused connection, ``timed out`` for a timeout); a commit's conditional PUT
is never retried by it, and Sail then says only ``Connection reset by peer (os error 104)``.
``store_fault`` recognises exactly these: a store's ``Generic <store> error`` (or
object_store's ``Server returned non-2xx status code``, which Sail may quote alone) together
with a 5xx or 429 status, a transient S3 error code or a transport failure, or a message that
is nothing but an OS connection error. A 403 or 404 from the store is not transient and
stays terminal. Data errors are recognised first, so a row value quoted in one never makes
it a store fault; a store fault's message keeps the store's own words, shortened to
status, S3 error code and request (no row values: they name objects, not rows).

gRPC's fork support is switched off (``GRPC_ENABLE_FORK_SUPPORT=false``, unless the
environment says otherwise) before the Spark Connect client loads gRPC. With it on,
grpcio 1.81 and later restart their poller thread in a forked child, which then dies on the
epoll descriptor ``subprocess`` closes before ``exec`` (grpc/grpc#43055): a process that
runs a command while a Spark call is in flight - the tests and the demo start and stop
PostgreSQL with ``pg_ctl`` - had that command killed by SIGSEGV. wal2delta never uses gRPC
in a forked child, which is all fork support is for.

The embedded engine's parallelism (Sail's ``execution.default_parallelism``, set through
its environment variable before the server starts; no Spark setting reaches it) is the
usable CPU cores less one, at least 1, unless configured or set in the environment. The
daemon's capture and planning threads keep about one core busy, and a MERGE split into
more partitions than the cores left hashes both of its inputs into partitions and writes
a file per partition for nothing: on two cores, one partition made ``bench e2e`` about 9%
faster (ten alternating pairs) and halved the files a MERGE writes (docs/performance-log.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from math import ceil
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from decoder import cause_line
from sink.base import SinkDataError, SinkError, SinkRetryableError, SinkStoreError
from sink.engine.deadline import engine_call
from sink.settings import SparkSettings

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # the module docstring

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("wal2delta.sink")

DEFAULT_CONF: Final[Mapping[str, str]] = {"spark.sql.session.timeZone": "UTC"}
EMBEDDED_HOST: Final = "127.0.0.1"
SAIL_PARALLELISM_ENV: Final = "SAIL_EXECUTION__DEFAULT_PARALLELISM"
"""Sail's ``execution.default_parallelism`` as an environment variable."""
_CGROUP_CPU_MAX: Final = Path("/sys/fs/cgroup/cpu.max")
_DELTA_EXTENSION: Final = "io.delta.sql.DeltaSparkSessionExtension"
_DELTA_CATALOG: Final = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# Jar name prefixes a classic session needs on its classpath (delta-spark_4.2_2.13-4.4.1.jar,
# delta-storage-4.4.1.jar), and those that make s3a:// (and s3://) lakes work.
_DELTA_JARS: Final = ("delta-spark_", "delta-storage-")
_S3A_JARS: Final = ("hadoop-aws-", "bundle-")
_PACKAGES: Final = "spark.jars.packages"
_S3A_FILE_SYSTEM: Final = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_S3A_ABSTRACT_FILE_SYSTEM: Final = "org.apache.hadoop.fs.s3a.S3A"
# s3:// is the lake URI the other engines (Sail, delta-rs) read; Hadoop knows only s3a://,
# so both schemes go to the S3A file system. Credentials come from S3A's default chain
# (AWS_* environment variables, web identity, instance profile).
_S3A_CONF: Final[Mapping[str, str]] = {
    "spark.hadoop.fs.s3a.impl": _S3A_FILE_SYSTEM,
    "spark.hadoop.fs.s3.impl": _S3A_FILE_SYSTEM,
    "spark.hadoop.fs.AbstractFileSystem.s3a.impl": _S3A_ABSTRACT_FILE_SYSTEM,
    "spark.hadoop.fs.AbstractFileSystem.s3.impl": _S3A_ABSTRACT_FILE_SYSTEM,
}

# Sessions started in embedded mode, so stop_spark_session can stop their server too.
_embedded_servers: dict[int, object] = {}
_servers_lock = threading.Lock()


def _import_pyspark_connect() -> None:
    """Import pyspark's Spark Connect client, silencing its pandas version notice.

    pyspark 4.2 warns (FutureWarning) that it does not fully support pandas 3 when its
    Connect client is imported. wal2delta ships Arrow tables and never goes through
    pandas, so the notice does not apply; it would otherwise turn into an error wherever
    warnings are errors (the test suite).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
        )
        import pyspark.sql.connect.session  # noqa: F401, PLC0415


def create_spark_session(settings: SparkSettings) -> SparkSession:
    """Create the process's Spark session as configured.

    Args:
        settings: engine mode, Connect URL and extra Spark settings.

    Returns:
        A new session; give it back to ``stop_spark_session`` when done.

    Raises:
        SinkError: the engine could not be started or reached (retryable when it was a
            connectivity problem).
    """
    conf = {**DEFAULT_CONF, **settings.conf}
    with engine_errors("starting the Spark session"):
        match settings.mode:
            case "embedded":
                return _create_embedded(conf, settings.parallelism)
            case "connect":
                if not settings.url:
                    raise SinkError("sink.spark.url is required when sink.spark.mode is connect")
                return _create_connect(settings.url, conf)
            case "classic":
                return _create_classic(conf)


def _create_connect(url: str, conf: Mapping[str, str]) -> SparkSession:
    _import_pyspark_connect()
    from pyspark.sql import SparkSession  # noqa: PLC0415 - heavy import, only when used

    builder = SparkSession.builder.remote(url)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.create()
    return session


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity, capped by a cgroup v2 CPU quota
    (a Kubernetes CPU limit)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()
        if quota != "max":
            cores = min(cores, max(1, ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota here
    return cores


def embedded_parallelism(cores: int | None = None) -> int:
    """The embedded engine's default parallelism: ``cores`` (the usable ones) less one for
    the daemon's own threads, at least 1 (the module docstring)."""
    return max(1, (usable_cores() if cores is None else cores) - 1)


def _create_embedded(conf: Mapping[str, str], parallelism: int | None) -> SparkSession:
    from pysail.spark import SparkConnectServer  # noqa: PLC0415 - heavy import, only when used

    if parallelism is not None:
        os.environ[SAIL_PARALLELISM_ENV] = str(parallelism)
    else:
        os.environ.setdefault(SAIL_PARALLELISM_ENV, str(embedded_parallelism()))
    log.info("starting the embedded Sail engine", parallelism=os.environ[SAIL_PARALLELISM_ENV])
    server = SparkConnectServer(EMBEDDED_HOST, 0)
    server.start(background=True)
    address = server.listening_address
    if address is None:
        server.stop()
        raise SinkError("the embedded Sail Spark Connect server did not start listening")
    host, port = address
    try:
        session = _create_connect(f"sc://{host}:{port}", conf)
    except BaseException:
        server.stop()
        raise
    with _servers_lock:
        _embedded_servers[id(session)] = server
    return session


def _create_classic(conf: Mapping[str, str]) -> SparkSession:
    session_conf = classic_session_conf(_spark_jars_dir(), conf)
    builder = _classic_builder()
    for key, value in session_conf.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    return session


def _classic_builder() -> SparkSession.Builder:
    """A local-JVM session builder (needs the ``classic`` extra: pyspark, a JRE)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - heavy import, only when used

    return SparkSession.builder.master("local[*]").appName("wal2delta")


def _spark_jars_dir() -> Path:
    """Where a local Spark takes its classpath from: ``$SPARK_HOME/jars`` or pyspark's own."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        return Path(spark_home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SinkError(
            "sink.spark.mode classic needs pyspark and delta-spark: "
            "pip install 'wal2delta[classic]'"
        )
    return Path(spec.origin).parent / "jars"


def classic_session_conf(jars_dir: Path, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of a classic (local JVM) session that uses the jars already present.

    A classic session never resolves anything from Maven at start: the Delta jars (and, for
    ``s3://`` lakes, hadoop-aws with the AWS SDK bundle) must already be on the classpath in
    ``jars_dir`` - the ``-jre`` image puts them there at build time
    (``deploy/docker/prefetch_delta_jars.py``). The one way around is explicit: settings
    that name ``spark.jars.packages`` themselves (``sink.spark.conf``) resolve what they name.

    Args:
        jars_dir: the local Spark's jar directory (``pyspark/jars`` or ``$SPARK_HOME/jars``).
        conf: the configured settings, applied last (they win over the defaults here).

    Returns:
        Spark settings: the Delta SQL extension and catalog, the S3A file system for
        ``s3a://`` and ``s3://`` when its jars are present, then ``conf``.

    Raises:
        SinkError: the Delta jars are not in ``jars_dir`` and ``conf`` does not name
            ``spark.jars.packages``.
    """
    given = dict(conf or {})
    jars = {jar.name for jar in jars_dir.glob("*.jar")} if jars_dir.is_dir() else set()
    missing = [prefix for prefix in _DELTA_JARS if not _has_jar(jars, prefix)]
    if missing and _PACKAGES not in given:
        raise SinkError(
            f"sink.spark.mode classic needs the Delta jars ({', '.join(p + '*' for p in missing)})"
            f" in {jars_dir}, and wal2delta does not download them at start: use the -jre "
            "image (docker build --build-arg WITH_JRE=true), or install the classic extra "
            "(pip install 'wal2delta[classic]') and run deploy/docker/prefetch_delta_jars.py "
            f"once, or name the packages yourself in sink.spark.conf ({_PACKAGES})"
        )
    settings = {
        "spark.sql.extensions": _DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": _DELTA_CATALOG,
    }
    if all(_has_jar(jars, prefix) for prefix in _S3A_JARS):
        settings.update(_S3A_CONF)
    settings.update(given)
    return settings


def _has_jar(jars: set[str], prefix: str) -> bool:
    return any(name.startswith(prefix) for name in jars)


def is_embedded(spark: SparkSession) -> bool:
    """Whether ``spark`` talks to the engine embedded in this process (``embedded`` mode),
    which reads this machine's files as the daemon sees them."""
    with _servers_lock:
        return id(spark) in _embedded_servers


def stop_spark_session(spark: SparkSession) -> None:
    """Stop a session made by ``create_spark_session`` and, if embedded, its server.

    Safe to call twice.
    """
    with _servers_lock:
        server = _embedded_servers.pop(id(spark), None)
    try:
        with engine_call("stopping the Spark session"):
            spark.stop()
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]


# --- error translation ---------------------------------------------------------------------

_RETRYABLE_GRPC_CODES: Final = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "RESOURCE_EXHAUSTED"}
)
# Delta's optimistic-concurrency failures (ConcurrentAppendException and friends, delta-rs's
# CommitConflictError variants) mean another writer committed first; applying the batch
# again is the documented remedy. Only these exact names count: a generic word such as
# "concurrent" could come from a row value quoted in a data error. Sail's transaction errors
# carry no class name: a conflict, or a MERGE (committed without retries) finding the table
# changed since it read it, says "Failed to commit transaction: ..."
# (sail-delta-lake, ``TransactionError::CommitConflict`` and ``MaxCommitAttempts``), a lost
# race for a version "Tried committing existing table version: N".
_RETRYABLE_MARKERS: Final = (
    "ConcurrentAppend",
    "ConcurrentDeleteRead",
    "ConcurrentDeleteDelete",
    "ConcurrentTransaction",
    "ConcurrentWrite",
    "MetadataChangedException",
    "ProtocolChangedException",
    "CommitConflict",
    "VersionAlreadyExists",
    "Failed to commit transaction: ",
    "Tried committing existing table version: ",
)
# A Spark Connect server that restarted while a call was in flight: pyspark's client retries
# the call (reattaches to its operation) until the server is back, and the new server knows
# nothing of the operation. Sail 0.7.2 answers ``IllegalArgumentException: invalid argument:
# operation not found: <operation id>`` - an exception class that otherwise means bad data,
# so it is recognised first, by the whole shape of the message at its start (a row value
# quoted later in a data error cannot match). The operation died with the old server, so
# nothing of it can still commit: replaying the batch is safe (decision 0124).
_LOST_OPERATION: Final = re.compile(
    r"(?:invalid argument: )?operation not found: [0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}"
    r"-[0-9a-fA-F]{12}(?:\s|$)"
)
# The same restart between two calls of one step: a MERGE's inline source, registered as a
# temporary view of the session (``sink.tables``, connect mode) on the old server, is not on
# the new one: ``AnalysisException: Temporary View not found: __w2d_source_<n>``. The name
# is wal2delta's own (``sink.plan.HELPER_PREFIX``), at the start of the message.
_LOST_VIEW: Final = re.compile(r"(?:\[[A-Z_.]+\] )?Temporary View not found: __w2d_source_\d+\b")
_DATA_ERROR_CLASSES: Final = frozenset(
    {
        "ArithmeticException",
        "NumberFormatException",
        "DateTimeException",
        "IllegalArgumentException",
        "SparkUpgradeException",
        "ArrowInvalid",
        "ArrowTypeError",
    }
)


# Spark error conditions (error classes) that mean the data does not fit the table.
_DATA_ERROR_CONDITIONS: Final = (
    "INCOMPATIBLE_DATA_FOR_TABLE",
    "CAST_INVALID_INPUT",
    "CAST_OVERFLOW",
    "NUMERIC_VALUE_OUT_OF_RANGE",
    "ARITHMETIC_OVERFLOW",
    "DATATYPE_MISMATCH",
    "DELTA_FAILED_TO_MERGE_FIELDS",
    "DELTA_MERGE_INCOMPATIBLE_DATATYPE",
)


def _grpc_code(exc: BaseException) -> str | None:
    get_code = getattr(exc, "getGrpcStatusCode", None) or getattr(exc, "code", None)
    if get_code is None or not callable(get_code):
        return None
    try:
        code = get_code()
    except Exception:
        return None
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else None


def _condition(exc: BaseException) -> str | None:
    get_condition = getattr(exc, "getCondition", None)
    if get_condition is None:
        return None
    try:
        condition = get_condition()
    except Exception:
        return None
    return condition if isinstance(condition, str) else None


def classify_engine_error(exc: BaseException, action: str) -> SinkError:
    """Map an error raised by the Spark engine to the matching ``SinkError``.

    Args:
        exc: what pyspark, gRPC, py4j or Sail raised.
        action: what the sink was doing, for the message ("merging into public.t").

    Returns:
        The error to raise (``from exc``), retryable or not.
    """
    kind = type(exc).__name__
    condition = _condition(exc)
    detail = kind if condition is None else f"{kind}, {condition}"
    code = _grpc_code(exc)
    text = str(exc)
    if code in _RETRYABLE_GRPC_CODES or isinstance(exc, ConnectionError | TimeoutError):
        return SinkRetryableError(
            f"the Spark engine could not be reached while {action} ({detail}); "
            "the batch will be replayed"
        )
    if _LOST_OPERATION.match(text) or _LOST_VIEW.match(text):
        return SinkRetryableError(
            f"the Spark engine lost the session's state while {action} ({detail}: it "
            "restarted); the batch will be replayed"
        )
    if any(marker in text or marker in kind for marker in _RETRYABLE_MARKERS):
        return SinkRetryableError(
            f"a concurrent commit conflicted while {action} ({detail}); the batch will be replayed"
        )
    data_condition = condition is not None and condition.startswith(_DATA_ERROR_CONDITIONS)
    data_message = text.lstrip("[").startswith(_DATA_ERROR_CONDITIONS)
    if data_condition or data_message or kind in _DATA_ERROR_CLASSES:
        return SinkDataError(
            f"the Spark engine rejected the data while {action} ({detail}): {engine_message(exc)}"
        )
    store = store_fault(exc, action)
    if store is not None:
        return store
    return SinkError(f"the Spark engine failed while {action} ({detail}): {engine_message(exc)}")


def engine_message(exc: BaseException) -> str:
    """The engine's own words: the first line of its message, trimmed, secrets masked."""
    return cause_line(exc).removeprefix(type(exc).__name__ + ": ")


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate engine errors raised inside the block into ``SinkError`` subclasses.

    The block is also one engine call under the process's call deadline
    (``deadline.engine_call``).
    """
    try:
        with engine_call(action):
            yield
    except SinkError:
        raise
    except Exception as exc:
        raise classify_engine_error(exc, action) from exc


# --- object-store faults (the module docstring) --------------------------------------------

STORE_OPERATIONS: Final = ("merge", "append", "commit", "checkpoint", "read", "write", "other")
"""The ``operation`` label of ``wal2delta_store_retries_total``: what the sink was doing."""
_OPERATION_VERBS: Final = (
    ("merging", "merge"),
    ("appending", "append"),
    ("committing", "commit"),
    ("recording", "commit"),
    ("reading", "read"),
    ("starting", "read"),
    ("writing", "write"),
    ("creating", "write"),
    ("adding", "write"),
    ("resetting", "write"),
    ("purging", "write"),
    ("replacing", "write"),
    ("truncating", "write"),
)
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
# object_store's own error of a cloud store (``Generic {store} error``); its local file
# system and delta-rs's own errors ("Generic DeltaTable error") are not store faults.
_STORE_ERROR: Final = re.compile(r"\bGeneric (?:S3|GCS|MicrosoftAzure|HTTP) error\b")
# object_store's words for a request it gave up on; Sail quotes them alone at times (reading
# a table's log: "Server returned non-2xx status code: 503 Service Unavailable: <xml>").
_STORE_ANSWER: Final = "Server returned non-2xx status code"
_TRANSIENT_STATUS: Final = re.compile(r"status code:?[\s↳]*(5\d\d|429)\b([A-Za-z ]*)")
_S3_CODE: Final = re.compile(r"<Code>(\w+)</Code>")
_TRANSIENT_S3_CODES: Final = frozenset(
    {
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
    }
)
_TRANSPORT_FAILURES: Final = (
    "error sending request",
    "connection error",
    "Connection reset",
    "connection closed",
    "Broken pipe",
    "timed out",
    "error decoding response body",
)
_REQUEST: Final = re.compile(r"Error performing (GET|PUT|POST|DELETE|HEAD) (\S+)")
# The whole first line of Sail's error when a commit's PUT (which object_store never
# retries) lost its connection.
_BARE_CONNECTION_ERROR: Final = re.compile(
    r"(?:Connection reset by peer|Connection refused|Connection aborted|Broken pipe"
    r"|Connection timed out) \(os error \d+\)"
)


def store_fault(exc: BaseException, action: str) -> SinkStoreError | None:
    """The ``SinkStoreError`` for a transient object-store failure, None for anything else.

    Args:
        exc: what Sail (through pyspark) or delta-rs raised.
        action: what the sink was doing, for the message ("merging into public.t").
    """
    text = _ANSI.sub("", str(exc))
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    summary: str | None = None
    if _STORE_ERROR.search(text) or _STORE_ANSWER in text:
        summary = _store_summary(text)
    elif _BARE_CONNECTION_ERROR.fullmatch(first):
        summary = first
    if summary is None:
        return None
    request = _REQUEST.search(text)
    return SinkStoreError(
        f"the object store failed while {action} ({type(exc).__name__}): {summary}; "
        "the batch will be retried",
        operation=store_operation(action, f"{request[1]} {request[2]}" if request else ""),
        store_error=summary,
    )


def _store_summary(text: str) -> str | None:
    """The store's error in one line - status and S3 code, or the transport failure, and
    the request - or None when it is not transient (a 403, a 404)."""
    store = _STORE_ERROR.search(text)
    status = _TRANSIENT_STATUS.search(text)
    code = _S3_CODE.search(text)
    transient_code = code is not None and code.group(1) in _TRANSIENT_S3_CODES
    if status is not None:
        failure = f"{status.group(1)} {status.group(2).strip()}".strip()
        if code is not None:
            failure += f" ({code.group(1)})"
    elif transient_code:
        assert code is not None
        failure = code.group(1)
    else:
        transport = next((t for t in _TRANSPORT_FAILURES if t.lower() in text.lower()), None)
        if transport is None:
            return None
        failure = transport
    request = _REQUEST.search(text)
    where = ""
    if request is not None:
        url = request.group(2).split("?")[0]
        path = re.sub(r"^[a-z]+://[^/]+", "", url)
        where = f" on {request.group(1)} {path}"
    prefix = store.group(0) if store is not None else "the store answered"
    return cause_line(RuntimeError(f"{prefix}: {failure}{where}")).removeprefix("RuntimeError: ")


def store_operation(action: str, request: str = "") -> str:
    """The ``STORE_OPERATIONS`` label: a checkpoint or a commit when the failed request
    wrote one (``PUT .../_delta_log/...``), else what the action's verb says ("merging into
    public.t" -> "merge")."""
    if request.startswith(("PUT ", "POST ")) and "/_delta_log/" in request:
        return "checkpoint" if "checkpoint" in request else "commit"
    first = action.split(" ", 1)[0].lower()
    return next((op for verb, op in _OPERATION_VERBS if verb == first), "other")
