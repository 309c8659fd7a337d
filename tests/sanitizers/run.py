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
        returncode = subprocess.run([*command, *pytest_args, *files], cwd=ROOT, env=env).returncode
        found = sorted(reports.iterdir())
        for report in found:
            print(f"\n=== {report.name} ===\n{report.read_text()}", file=sys.stderr)
        print(f"sanitizers: {len(found)} report(s), pytest exit status {returncode}")
        return returncode or (1 if found else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
