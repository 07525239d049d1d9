"""How pytest-xdist hands the suite to its workers (``tests/conftest.py`` returns this scheduler).

A test file at a time per worker, so a module's fixtures (an engine and its pack workers, a
server) are set up once; the Ray tests all in one worker, since each worker would start a cluster
of its own on the same loopback addresses; and the files that take minutes first, so none of
them starts last and holds the run up alone. (``xdist_group`` and ``--dist loadgroup`` would say
the same with markers, but xdist 3.8 cannot set them on pytest 9's node ids.)
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: Folders whose tests all run in one worker: they share a session resource of which the
#: machine holds only one (a two-node Ray cluster on 127.0.0.2-3).
ONE_WORKER = ("tests/ray/",)
#: Scopes handed out first, in this order: the longest first (as measured on 2 cores: the first
#: use builds its venvs from scratch, the Ray folder starts a cluster, then the torch files and
#: the schemathesis run; then the longest of the fast tier). The others follow, those with most
#: tests first (xdist's own order). The first match counts.
FIRST = (
    "tests/chaos/test_first_use.py",
    "tests/ray/",
    "tests/generate/test_diffusers.py",
    "tests/models/test_batching.py",
    "tests/text/test_openai.py",
    "tests/api/test_fuzz.py",
    "tests/models/",
    "tests/generate/",
    "tests/text/",
    "tests/chaos/test_lora_hostile.py",
    "tests/chaos/test_downloads_hostile.py",
    "tests/hosted/test_api.py",
    "tests/chaos/test_worker_faults.py",
    "tests/chaos/test_openai_hostile.py",
    "tests/api/test_durability.py",
    "tests/e2e/test_cli.py",
    "tests/e2e/test_newcomer_cli.py",
)


def rank(scope: str) -> int:
    """Where ``scope`` goes in the queue: the index of its ``FIRST`` entry, else last."""
    return next((i for i, first in enumerate(FIRST) if scope.startswith(first)), len(FIRST))


class FileScheduling(LoadScopeScheduling):
    """xdist's ``loadscope``, with a file (or a ``ONE_WORKER`` folder) for a scope and the
    ``FIRST`` scopes at the head of the queue."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return next((f for f in ONE_WORKER if path.startswith(f)), path)

    def _assign_work_unit(self, node: object) -> None:
        if not self._ordered:  # the queue is complete by the first assignment
            self._ordered = True
            units = sorted(self.workqueue.items(), key=lambda unit: rank(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)  # type: ignore[arg-type]
