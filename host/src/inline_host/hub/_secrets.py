"""Secrets held by name: ``INLINE_DATA_DIR/secrets.json`` (mode 0600, written atomically).

Each secret is stored for one **service**: ``hf`` (the Hub), or the namespace of the nodes that
may use it (``anthropic`` for ``anthropic/complete``, ``google`` for ``google/gemini-*``, ``acme``
for a pack's ``acme/...`` nodes). ``inline secrets set NAME --service S`` records it; well-known
names infer it (``HF_*`` -> hf, ``ANTHROPIC_*`` -> anthropic, ``GEMINI_*`` / ``GOOGLE_*`` -> google,
``OPENAI_*`` -> openai), which is how a file written before services keeps working. A secret is
used only for its service: a Hub token never reaches Anthropic, an Anthropic key never the Hub.

A node names the secrets it needs in its params (a string param whose key ends in ``_secret``,
such as ``api_key_secret``); the host hands a call exactly those of the node's service, in the
call, and nothing else. Values never reach a log, a take, an error or ``/v1/health``: only their
names are ever shown.

On disk a secret is ``"NAME": {"value": ..., "service": ...}``; a bare ``"NAME": "value"`` (the
older form) is read with the inferred service.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

FILE_NAME: Final = "secrets.json"
SECRET_PARAM_SUFFIX: Final = "_secret"
#: The Hub's service name (``--token-secret``, ``tokenSecret``).
HUB_SERVICE: Final = "hf"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
_SERVICE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
#: Name prefixes (upper-cased) and the service they are for.
_KNOWN_PREFIXES: Final = (
    ("HF_", HUB_SERVICE), ("HUGGING_FACE_", HUB_SERVICE), ("HUGGINGFACE_", HUB_SERVICE),
    ("ANTHROPIC_", "anthropic"), ("GEMINI_", "google"), ("GOOGLE_", "google"),
    ("OPENAI_", "openai"),
)  # fmt: skip


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


def infer_service(name: str) -> str | None:
    """The service a well-known secret name is for (``HF_TOKEN`` -> ``hf``), else None."""
    upper = name.upper()
    return next((svc for prefix, svc in _KNOWN_PREFIXES if upper.startswith(prefix)), None)


def check_service(service: str) -> str:
    """``service`` if it is a valid service name (``hf``, ``anthropic``, a pack's namespace)."""
    if not _SERVICE.match(service):
        raise SecretError(
            f"'{service}' is not a service: use lowercase letters, digits, '-' or '_' (hf, "
            "anthropic, google, openai, or the namespace of the nodes that use it)"
        )
    return service


@dataclass(frozen=True, slots=True)
class Secret:
    """A stored value and the service it may be used for (None: none, it is used nowhere)."""

    value: str = field(repr=False)
    service: str | None


class SecretStore:
    """The secrets file of one data dir. Reads are cheap (a small JSON file); every write
    replaces the file atomically (temp file with mode 0600, fsync, rename)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME

    def _read(self) -> dict[str, Secret]:
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
        out: dict[str, Secret] = {}
        for k, v in data.items():
            if isinstance(v, dict):
                service = str(v["service"]) if v.get("service") else infer_service(str(k))
                out[str(k)] = Secret(str(v.get("value", "")), service)
            else:
                out[str(k)] = Secret(str(v), infer_service(str(k)))
        return out

    def _write(self, entries: Mapping[str, Secret]) -> None:
        data = {name: {"value": s.value, "service": s.service} for name, s in entries.items()}
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
        held = self._read().get(name)
        return held.value if held is not None else None

    def service_of(self, name: str) -> str | None:
        """The service ``name`` is stored for (None: not stored, or for no service)."""
        held = self._read().get(name)
        return held.service if held is not None else None

    def services(self) -> dict[str, str | None]:
        """The service each stored secret is for, in one read (never their values)."""
        return {name: held.service for name, held in self._read().items()}

    def for_service(self, name: str, service: str) -> str:
        """The value of ``name`` for use with ``service``; ``SecretError`` when it is not
        stored, or stored for another service (then it is never used here)."""
        held = self._read().get(name)
        if held is None:
            raise SecretError(
                f"the secret '{name}' is not set: store it with 'inline secrets set {name} "
                f"--service {service}'"
            )
        if held.service != service:
            stored = f"for '{held.service}'" if held.service else "for no service"
            raise SecretError(
                f"the secret '{name}' is stored {stored}, not for '{service}': it is not sent "
                f"there (store a {service} key with 'inline secrets set NAME --service {service}')"
            )
        return held.value

    def set(self, name: str, value: str, service: str | None = None) -> str | None:
        """Store (or replace) ``name`` for ``service`` (inferred from a well-known name when
        None); the service recorded."""
        check_secret_name(name)
        if service is not None:
            check_service(service)
        if not value:
            raise SecretError(f"the value of '{name}' is empty")
        data = self._read()
        data[name] = Secret(value, service or infer_service(name))
        self._write(data)
        return data[name].service

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


def node_service(node_type: str) -> str:
    """The service a node's secrets must be stored for: its namespace (``anthropic`` for
    ``anthropic/complete``)."""
    return node_type.split("/", 1)[0].lower()


def secrets_for_call(data_dir: Path, params: Mapping[str, Any], node_type: str) -> dict[str, str]:
    """The secrets one call of ``node_type`` gets: those its params name that the store holds
    for the node's service (one missing, or stored for another service, is left out; the
    node's ``ctx.secret`` then names it in its error)."""
    names = named_secrets(params)
    if not names:
        return {}
    try:
        held = SecretStore(data_dir)._read()
    except SecretError:
        return {}
    service = node_service(node_type)
    return {n: held[n].value for n in names if n in held and held[n].service == service}


def secrets_reader(data_dir: Path) -> Callable[[Mapping[str, Any], str], dict[str, str]]:
    """``secrets_for_call`` over the store of ``data_dir``: what the supervisor is handed."""
    return lambda params, node_type: secrets_for_call(data_dir, params, node_type)
