"""Benchmark: how much of a command's peak RSS is numba's compiler library, by page-cache state.

Every command that runs a kernel loads numba, and numba maps llvmlite's shared library
(libllvmlite.so, about 170 MB on disk). Its pages count in the process's RSS once mapped, and
how many get mapped depends on the operating system's page cache, not on simindex: a fault
in a file mapping also maps the neighbouring pages that are already cached, so with the whole
library in the cache (just installed, or read by another process) loading it maps much more
of it than when it has to be read from disk. Peak-RSS figures of the other benchmarks carry
this; here it is measured by itself.

For each state, in fresh processes (--repeat runs each, the median reported):
* ``evicted``: the library's pages dropped from the page cache first (posix_fadvise
  DONTNEED, which needs no privilege and drops only pages no process maps);
* ``cached``: the whole library read once first, so every page of it is in the cache.
It measures ``import numba`` alone (RSS, and the RSS of libllvmlite's mappings, from
/proc/self/smaps) and the peak RSS (ru_maxrss) of `simindex query` and `simindex stats` (no
numba) on a two-document SQLite index, kernels compiled beforehand.

Run from the repository root (Linux only):
    .venv/bin/python benchmarks/bench_library_pages.py [--repeat 5] [--write-results]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish  # noqa: E402 (the sibling scripts)
from bench_scale import run_step  # noqa: E402

SIMINDEX = [sys.executable, "-m", "simindex"]
# Run in a child: RSS after `import numba`, and the part of it in libllvmlite's mappings.
PROBE = """
import json, re
import numba  # noqa: F401
total = library = 0
name = ""
for line in open("/proc/self/smaps"):
    fields = line.split()
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        name = fields[5] if len(fields) > 5 else ""
    elif line.startswith("Rss:"):
        kib = int(fields[1])
        total += kib
        library += kib if "libllvmlite" in name else 0
print(json.dumps({"rss": total / 1024, "library": library / 1024}))
"""


def library_path() -> Path:
    spec = importlib.util.find_spec("llvmlite")
    found = sorted(Path(spec.origin).parent.glob("binding/libllvmlite*.so*"))
    if not found:
        raise SystemExit("libllvmlite's shared library not found next to llvmlite")
    return found[0]


def set_state(library: Path, state: str) -> None:
    with library.open("rb") as file:
        if state == "evicted":
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            while file.read(2**20):
                pass


def peak_rss_mib(label: str, command: list[str]) -> float:
    """Peak RSS of one run of command (MiB), as bench_scale measures a step's."""
    result = run_step(label, command)
    if not result["ok"]:
        sys.exit(f"Error: {label} failed: {result['error']}")
    return result["peak_rss_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    library = library_path()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        db = str(Path(scratch) / "tiny.db")
        corpus = Path(scratch) / "tiny.jsonl"
        corpus.write_text(
            '{"id": "a", "text": "a short story about the harbour"}\n'
            '{"id": "b", "text": "a short story about the harbor"}\n',
            encoding="utf-8",
        )
        subprocess.run([*SIMINDEX, "ingest", str(corpus), "--db", db], check=True)  # compiles
        commands = {
            "query": [*SIMINDEX, "query", "a short story about the harbour", "--db", db],
            "stats": [*SIMINDEX, "stats", "--db", db],
        }
        for state in ("evicted", "cached"):
            runs: dict[str, list[float]] = {"import": [], "library": []}
            for _ in range(args.repeat):
                set_state(library, state)
                probed = json.loads(
                    subprocess.run(
                        [sys.executable, "-c", PROBE], check=True, capture_output=True
                    ).stdout
                )
                runs["import"].append(probed["rss"])
                runs["library"].append(probed["library"])
                for name, command in commands.items():
                    set_state(library, state)
                    runs.setdefault(name, []).append(peak_rss_mib(f"{state} {name}", command))
            results[state] = {name: statistics.median(values) for name, values in runs.items()}
            print(state, {name: round(value, 1) for name, value in results[state].items()})

    rows = [
        ("RSS after `import numba`", "import"),
        ("of which libllvmlite's mappings", "library"),
        ("peak RSS of `simindex query` (numba)", "query"),
        ("peak RSS of `simindex stats` (no numba)", "stats"),
    ]
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: numba's library in peak RSS, by page cache",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; {library.name} {library.stat().st_size / 2**20:.0f} MiB",
        f"- Command: `.venv/bin/python benchmarks/bench_library_pages.py --repeat {args.repeat}`"
        " (median of the runs; MiB)",
        "",
        "| | library evicted from the page cache | library cached |",
        "|---|---:|---:|",
        *(
            f"| {label} | {results['evicted'][key]:.0f} | {results['cached'][key]:.0f} |"
            for label, key in rows
        ),
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
