"""Build every C accelerator of setup.py with AddressSanitizer and UBSan, and run their tests.

    python tests/sanitizers/run.py [pytest options] [test paths]

The extensions are the ones ``setup.py`` lists (read from it, so a new one is covered the day
it is added), built into a copy of ``src/`` in a temporary directory with
``-fsanitize=address,undefined``; the tests run from this tree with that copy first on
``PYTHONPATH``. Which tests: those marked ``@pytest.mark.accelerator`` (a C twin held to its
Python reference, or hostile input fed to the C code), anywhere under ``tests/``, except those
also marked ``slow``. Mark the C variant only where a test runs on both implementations. Only
the files that name the mark are collected (or the paths given): the rest of the suite would
take minutes to import under ASan, and brings in Rust extensions (pydantic_core, orjson) that
leak at exit, along with CPython objects that only they point to.

Python is not built with ASan, so the runtime is preloaded (``LD_PRELOAD``), and
``PYTHONMALLOC=malloc`` gives every Python object its own malloc block, so a read past the end
of a ``bytes`` is caught rather than landing in pymalloc's arena. Each process (pytest, its
workers, the children some tests start) writes what ASan and LeakSanitizer find to a file of
its own; any such file fails the run, and is printed. UBSan (GCC's ignores ``log_path``)
prints to the process's stderr and stops it (``halt_on_error``), which fails the test; pytest
captures only Python's ``sys.stderr`` (``--capture=sys``), so its lines reach the log.

LeakSanitizer is on: CPython 3.11 leaves nothing unreachable at exit in these tests, and
``lsan.supp`` names what else does (tracemalloc, third-party libraries). It sees an object
that nothing points to any more (a ``bytes`` whose reference was never dropped), not one the
collector tracks (its lists still point to it); and since CPython has no frame pointers, the
stack it prints ends in the allocator (what leaked, not who): rerun the tests one file at a
time to find the culprit.

Leaks are checked where the tests run: in xdist's workers, not in the controller that hands
them out (``detect_leaks=0`` there). The controller runs no test, and its threads (execnet's,
one per worker) are what trips a known crash of LeakSanitizer's own stop-the-world tracer at
exit ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error",
google/sanitizers#1353), which once failed CI with every test passed. A worker can meet the
same crash, rarely: when every report of a run is that crash and nothing else, the run is
repeated once, and a second one fails it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
# -fno-wrapv undoes CPython's -fwrapv, which makes signed overflow defined and so invisible to
# UBSan. setup.py's own -O2 comes after these flags and wins: the code tested is the code shipped.
SANITIZE = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-wrapv -O1 -g"
RUNTIMES = ("libasan.so", "libubsan.so")
"""The sanitizer runtimes to preload, in this order (ASan must come first)."""
SUPPRESSIONS = Path(__file__).with_name("lsan.supp")


def extension_names() -> list[str]:
    """The ``ext_modules`` names setup.py declares, read by running it with ``setup`` caught."""
    with mock.patch("setuptools.setup") as setup:
        exec(compile((ROOT / "setup.py").read_text(), "setup.py", "exec"), {"__name__": "setup"})
    return [ext.name for ext in setup.call_args.kwargs["ext_modules"]]


def build(tree: Path) -> None:
    """A copy of the sources in ``tree``, its extensions built in place with the sanitizers."""
    for name in ("setup.py", "pyproject.toml", "README.md"):  # the build reads all three
        shutil.copy(ROOT / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=ignore)
    env = os.environ | {"CFLAGS": SANITIZE, "LDFLAGS": SANITIZE}
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, env=env, check=True
    )


def sanitized_environment(tree: Path, reports: Path) -> dict[str, str]:
    """The environment the tests run in: the runtimes preloaded, the sanitized copy first,
    ASan's findings written to files under ``reports``."""
    runtimes = [
        subprocess.run(
            ["gcc", f"-print-file-name={lib}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for lib in RUNTIMES
    ]
    env = {k: v for k, v in os.environ.items() if k != "MINIDB_PURE_PYTHON"}
    return env | {
        "ASAN_OPTIONS": f"abort_on_error=1:allocator_may_return_null=1:log_path={reports}/asan",
        "LSAN_OPTIONS": f"suppressions={SUPPRESSIONS}:print_suppressions=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "PYTHONMALLOC": "malloc",
        "LD_PRELOAD": " ".join(runtimes),
        "PYTHONPATH": os.pathsep.join([str(tree / "src"), env.get("PYTHONPATH", "")]),
    }


def check_imports(names: list[str], tree: Path, env: dict[str, str]) -> None:
    """Every extension imports from the sanitized copy (``optional=True`` would let a failed
    build pass unnoticed, and the tree's own build would then be tested)."""
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[2:]:\n"
        "    path = importlib.import_module(name).__file__\n"
        "    print('sanitized:', path)\n"
        "    assert path.startswith(sys.argv[1]), f'{name} is not the sanitized build'\n"
    )
    subprocess.run([sys.executable, "-c", probe, str(tree), *names], env=env, check=True)


def marked_files() -> list[str]:
    """The test files that name the ``accelerator`` mark (on a test, a module or a param)."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.accelerator" in path.read_text()
    )


TRACER_CRASH = "LeakSanitizer has encountered a fatal error"
"""What LeakSanitizer prints when its own tracer crashes: no finding, the check did not run."""
WORKER_OPTIONS = "MINIDB_SANITIZED_WORKER_ASAN_OPTIONS"
"""The workers' ``ASAN_OPTIONS``, handed through the controller (see ``controller``)."""


def runs_tests_itself(pytest_args: list[str]) -> bool:
    """Whether pytest runs the tests in its own process (no xdist workers)."""
    joined = " ".join(pytest_args)
    return any(flag in joined for flag in ("-n0", "-n 0", "no:xdist"))


def run_once(command: list[str], env: dict[str, str], reports: Path) -> tuple[int, list[Path]]:
    """One sanitized pytest run: its exit status and the reports it left."""
    for old in reports.iterdir():
        old.unlink()
    if runs_tests_itself(command):
        run_env = env
    else:
        run_env = env | {"ASAN_OPTIONS": env["ASAN_OPTIONS"] + ":detect_leaks=0",
                         WORKER_OPTIONS: env["ASAN_OPTIONS"]}  # fmt: skip
        command = [sys.executable, __file__, "--controller", *command[3:]]
    returncode = subprocess.run(command, cwd=ROOT, env=run_env).returncode
    found = sorted(reports.iterdir())
    for report in found:
        print(f"\n=== {report.name} ===\n{report.read_text()}", file=sys.stderr)
    print(f"sanitizers: {len(found)} report(s), pytest exit status {returncode}")
    return returncode, found


def main(pytest_args: list[str]) -> int:
    names = extension_names()
    with tempfile.TemporaryDirectory(prefix="minidb-sanitized-") as tmp:
        tree, reports = Path(tmp) / "tree", Path(tmp) / "reports"
        tree.mkdir()
        reports.mkdir()
        build(tree)
        env = sanitized_environment(tree, reports)
        check_imports(names, tree, env)
        # Test by test across the workers: one file's C variants take minutes under ASan.
        command = [sys.executable, "-m", "pytest", "-m", "accelerator and not slow",
                   "--dist", "load", "--capture", "sys", "-p", "no:cacheprovider"]  # fmt: skip
        paths_given = any((ROOT / arg.split("::")[0]).exists() for arg in pytest_args)
        files = [] if paths_given else marked_files()
        command = [*command, *pytest_args, *files]
        returncode, found = run_once(command, env, reports)
        if found and all(TRACER_CRASH in report.read_text() for report in found):
            print("sanitizers: LeakSanitizer's tracer crashed (no finding): running once more")
            returncode, found = run_once(command, env, reports)
        return returncode or (1 if found else 0)


def controller(pytest_args: list[str]) -> int:
    """pytest's controller, started with leak checks off: the workers it starts inherit
    ``os.environ``, where they are turned back on (this process's own options were read when
    it started)."""
    import pytest

    os.environ["ASAN_OPTIONS"] = os.environ.pop(WORKER_OPTIONS)
    sys.path[0] = os.getcwd()  # as `python -m pytest` has it, not this script's folder
    return pytest.main(pytest_args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--controller"]:
        sys.exit(controller(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
