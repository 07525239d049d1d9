"""Finding uv on a host's first render, when two pack venvs are built at once (two threads).

``find_uv_bin`` reads ``sysconfig``, whose first fill is not thread-safe on Python 3.11: a
second thread that arrives while the first fills the table reads ``EXE`` as None and fails with
``can only concatenate str (not "NoneType") to str``. That was the first render's failure on a
fresh data dir (issue 21). The script below holds the first thread inside the fill, lets the
second one ask, and checks that both get uv.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sysconfig, threading
    from inline_registry._uv import uv_binary

    sysconfig._CONFIG_VARS = None  # as in a fresh process: nothing read yet
    inside, release = threading.Event(), threading.Event()
    fill = sysconfig._init_posix

    def held_fill(table):  # the first thread stops in the middle of the fill
        if not inside.is_set():
            inside.set()
            assert release.wait(60), "never released"
        fill(table)

    sysconfig._init_posix = held_fill
    found = {}

    def ask(name):
        try:
            found[name] = uv_binary()
        except Exception as exc:
            found[name] = f"{type(exc).__name__}: {exc}"

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert inside.wait(60)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    # The second may not finish while the first is inside the fill: if it does, it read
    # a half-filled table. (Bounded: on fixed code it waits the whole time, by design.)
    second.join(2)
    release.set()
    first.join(60)
    second.join(60)
    print(found["first"])
    print(found["second"])
    """
)


def test_two_threads_finding_uv_at_once_both_get_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("\n")[:2]
    assert first.endswith("/uv"), done.stdout
    assert second == first, done.stdout
