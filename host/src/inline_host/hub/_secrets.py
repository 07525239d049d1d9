"""Secrets held by name: ``INLINE_DATA_DIR/secrets.json`` (mode 0600, written atomically).

A node names the secrets it needs in its params (a string param whose key ends in ``_secret``,
such as ``api_key_secret``); the host hands a call exactly those, in the call, and nothing else.
Values never reach a log, a take, an error or ``/v1/health``: only their names are ever shown.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

FILE_NAME: Final = "secrets.json"
SECRET_PARAM_SUFFIX: Final = "_secret"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


class SecretError(Exception):
    """A secret name that is not allowed, or a secrets file that cannot be read or written."""


def check_secret_name(name: str) -> str:
    """``name`` if it is a valid secret name (letters, digits, ``_ . -``; not starting with a
    digit), else ``SecretError``."""
    if not _NAME.match(name):
        raise SecretError(
            f"'{name}' is not a secret name: use letters, digits, '_', '.' or '-' "
            "(starting with a letter or '_'), at most 128 characters"
        )
    return name


class SecretStore:
    """The secrets file of one data dir. Reads are cheap (a small JSON file); every write
    replaces the file atomically (temp file with mode 0600, fsync, rename)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME

    def _read(self) -> dict[str, str]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SecretError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            raise SecretError(f"{self.path} is not valid JSON; fix or remove it") from None
        if not isinstance(data, dict):
            raise SecretError(f"{self.path} must hold a JSON object of name -> value")
        return {str(k): str(v) for k, v in data.items()}

    def _write(self, data: Mapping[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".secrets.", suffix=".tmp", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(dict(sorted(data.items())), fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def names(self) -> list[str]:
        """The names of the stored secrets, sorted (never their values)."""
        return sorted(self._read())

    def get(self, name: str) -> str | None:
        """The value of ``name``, or None."""
        return self._read().get(name)

    def set(self, name: str, value: str) -> None:
        """Store (or replace) ``name``."""
        check_secret_name(name)
        if not value:
            raise SecretError(f"the value of '{name}' is empty")
        data = self._read()
        data[name] = value
        self._write(data)

    def remove(self, name: str) -> bool:
        """Forget ``name``; whether it was stored."""
        data = self._read()
        if data.pop(name, None) is None:
            return False
        self._write(data)
        return True


def named_secrets(params: Mapping[str, Any]) -> list[str]:
    """The secret names a node's resolved params name (string params ``*_secret``)."""
    return sorted(
        {
            v
            for k, v in params.items()
            if k.endswith(SECRET_PARAM_SUFFIX) and isinstance(v, str) and v and _NAME.match(v)
        }
    )


def secrets_for_call(data_dir: Path, params: Mapping[str, Any]) -> dict[str, str]:
    """The secrets one call gets: those its params name that the store holds (a missing one is
    left out; the node's ``ctx.secret`` then names it in its error)."""
    names = named_secrets(params)
    if not names:
        return {}
    try:
        held = SecretStore(data_dir)._read()
    except SecretError:
        return {}
    return {n: held[n] for n in names if n in held}
