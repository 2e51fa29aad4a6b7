"""What every benchmark shares besides its corpus: running a command and measuring it,
fresh databases, Markdown tables, and writing a script's section of RESULTS.md.

This module is imported by the scripts next to it; it is not a script itself.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
SIMINDEX = [sys.executable, "-m", "simindex"]


@dataclass(frozen=True)
class Measured:
    """A finished command: wall and CPU seconds, and its peak RSS in MiB (the largest of its
    process and the descendants it waited for: ``ru_maxrss`` from ``wait4``)."""

    seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    stderr: str


def run(
    command: Sequence[str], *, env: dict[str, str] | None = None, stdout: Path | None = None
) -> Measured:
    """Run ``command`` in its own process and measure it; raise RuntimeError (with the end
    of its stderr) if it fails. ``env`` replaces the environment; ``stdout`` keeps its
    output (else it is discarded)."""
    out = stdout.open("wb") if stdout else subprocess.DEVNULL
    try:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, env=env)
        stderr = process.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
    finally:
        if stdout:
            out.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(map(str, command[:6]))} failed: {stderr.strip()[-800:]}")
    return Measured(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stderr)


def simindex(*args: str, env: dict[str, str] | None = None, stdout: Path | None = None) -> Measured:
    """``simindex ARGS...`` as a user runs it: its own process, start-up included."""
    return run([*SIMINDEX, *args], env=env, stdout=stdout)


def warm_up(env: dict[str, str] | None = None) -> None:
    """One untimed ``simindex dedup`` of a small file: the first command after an install
    compiles simindex's kernels (and caches them), which no measured step should pay for."""
    with tempfile.TemporaryDirectory() as folder:
        simindex("dedup", str(REPO / "examples" / "news.jsonl"), "-o", f"{folder}/kept.jsonl",
                 env=env)  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# -- databases -----------------------------------------------------------------------------


def postgres_url(admin_url: str, name: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def postgres_database(admin_url: str, name: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database (its URL), dropped afterwards."""
    import psycopg

    def execute(statement: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(statement)

    execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_url(admin_url, name)
    finally:
        execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def sqlite_database(folder: Path, name: str) -> Iterator[str]:
    """A fresh SQLite file under ``folder`` (its URL), deleted afterwards."""
    path = folder / f"{name}.db"

    def delete() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    delete()
    try:
        yield f"sqlite:///{path}"
    finally:
        delete()


@contextmanager
def database(backend: str, name: str, admin_url: str, folder: Path) -> Iterator[str]:
    """A fresh database of ``backend`` ("sqlite" or "pg"), its URL."""
    if backend == "pg":
        with postgres_database(admin_url, name) as url:
            yield url
    else:
        with sqlite_database(folder, name) as url:
            yield url


def postgres_version(admin_url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(admin_url, connect_timeout=5) as conn:
            return conn.execute("SHOW server_version").fetchone()[0].split()[0]
    except Exception:  # noqa: BLE001 (no server: the machine line says so)
        return None


# -- reporting -----------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def commit() -> str:
    """The short hash of HEAD, with "+ changes" when simindex/ differs from it."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    changed = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "simindex", "migrations"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return head + (" + uncommitted changes" if changed else "")


def machine(admin_url: str | None = None) -> str:
    """Cores, memory, CPU model, Python and (given its URL) PostgreSQL's version."""
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    parts = [f"{os.cpu_count()} cores ({model})", f"{memory_kib / 2**20:.0f} GiB memory"]
    parts.append(f"Python {platform.python_version()}")
    if admin_url:
        parts.append(f"PostgreSQL {postgres_version(admin_url) or 'not reachable'}")
    return ", ".join(parts)


def command_line() -> str:
    """How this script was run, as a user would type it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    return " ".join(["python", str(shown), *sys.argv[1:]])


def write_section(title: str, body: str, admin_url: str | None = None) -> None:
    """Replace (or append) the section ``## title`` of RESULTS.md with ``body`` under the
    command that made it, the commit, the machine and the date."""
    section = "\n".join(
        [
            f"## {title}",
            "",
            f"- Command: `{command_line()}`",
            f"- Commit: {commit()}",
            f"- Machine: {machine(admin_url)}",
            f"- Date: {datetime.now(UTC):%Y-%m-%d}",
            "",
            body.strip(),
            "",
        ]
    )
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    heading = f"\n## {title}\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[: start + 1] + section + ("\n" + text[end + 1 :] if end >= 0 else "")
    RESULTS.write_text(text, encoding="utf-8")
    print(f"Wrote the section '{title}' of {RESULTS.relative_to(REPO)}")
