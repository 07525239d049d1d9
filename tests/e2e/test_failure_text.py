"""What ``inline run`` prints for a node that failed in the host (not in its worker): one line,
and with ``--debug`` the host-side traceback that says where (issue 21's first-render failure
printed its message only, even with ``--debug``)."""

from __future__ import annotations

from inline_core import NodeFailed
from inline_host._errors import PackStartFailed
from inline_host.cli._friendly import describe_failure


def _host_bug() -> None:
    raise TypeError('can only concatenate str (not "NoneType") to str')


def failed(cause: Exception) -> NodeFailed:
    try:
        try:
            if isinstance(cause, TypeError):
                _host_bug()
            raise cause
        except Exception as exc:
            raise NodeFailed("p", "input/text", exc) from exc
    except NodeFailed as exc:
        return exc


def test_a_host_side_bug_is_one_line_and_its_traceback_with_debug() -> None:
    exc = failed(TypeError())
    plain = describe_failure(exc)
    assert plain == "node 'p' (input/text): can only concatenate str (not \"NoneType\") to str"
    debug = describe_failure(exc, debug=True)
    assert debug.startswith(plain + "\nTraceback (most recent call last):")
    assert "in _host_bug" in debug and debug.endswith("to str")


def test_a_known_host_error_stays_one_line_with_debug() -> None:
    exc = failed(PackStartFailed("basics", "no handshake within 30s"))
    text = describe_failure(exc, debug=True)
    assert (
        text
        == "node 'p' (input/text): Pack 'basics' worker could not start: no handshake within 30s"
    )
