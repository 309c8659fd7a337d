"""The virtualenvs the workers run in: the queue suites' own (RQ, arq) and Celery's.

RQ and arq reuse ``tests.compat.queues._suites.venv_python`` (the library at the version its
suite pins, installed from its sdist). Celery has no suite there; its virtualenv is made by
the same function (created once under ``~/.cache/minidb-compat/venvs``, keyed by its pip
arguments) from a ``Suite`` that installs from PyPI instead of an sdist's tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.compat._sdist import cache_dir
from tests.compat.queues._suites import SUITES, Suite, venv_python

CELERY_REQUIREMENTS = ("celery[redis]>=5,<6",)
"""The newest Celery 5.x with its Redis extra (kombu's Redis transport, redis-py)."""


@dataclass(frozen=True)
class RegistryOnly(Suite):
    """A ``Suite`` for its virtualenv only: pip arguments that need no sdist, no tests."""

    def tree(self) -> Path:
        return cache_dir()


CELERY = RegistryOnly(
    "celery", "5", lambda tree: list(CELERY_REQUIREMENTS), (), lambda host, port: {}, 0.0
)


def library_python(library: str) -> Path:
    """The python of the virtualenv that holds ``library`` (rq, arq or celery)."""
    return venv_python(CELERY if library == "celery" else SUITES[library])
