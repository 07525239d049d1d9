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

A secret reaches a pack only when the operator **granted** it to that pack (``inline secrets
grant NAME PACK``): a call that names one its pack was not granted is refused, naming the grant
command, and the value is not sent. Storing a key for a service the first-party ``hosted``
pack serves (``anthropic``, ``google``) grants it to that pack.

On disk a secret is ``"NAME": {"value": ..., "service": ..., "grants": [PACK, ...]}``; a bare
``"NAME": "value"`` (the older form), or one without ``grants``, is read with the inferred
service, granted to ``hosted`` when that pack serves the service.
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

from .._errors import SecretNotGranted

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
#: The first-party pack that calls hosted providers, and the services its nodes are of.
HOSTED_PACK: Final = "hosted"
HOSTED_SERVICES: Final = frozenset({"anthropic", "google"})


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
    #: The packs that may receive it.
    grants: tuple[str, ...] = ()


def _default_grants(service: str | None) -> tuple[str, ...]:
    return (HOSTED_PACK,) if service in HOSTED_SERVICES else ()


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
                grants = v.get("grants")
                granted = (tuple(str(g) for g in grants) if isinstance(grants, list)
                           else _default_grants(service))  # fmt: skip
                out[str(k)] = Secret(str(v.get("value", "")), service, granted)
            else:
                service = infer_service(str(k))
                out[str(k)] = Secret(str(v), service, _default_grants(service))
        return out

    def _write(self, entries: Mapping[str, Secret]) -> None:
        data = {name: {"value": s.value, "service": s.service, "grants": sorted(s.grants)}
                for name, s in entries.items()}  # fmt: skip
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

    def grants(self) -> dict[str, tuple[str, ...]]:
        """The packs each stored secret is granted to (never their values)."""
        return {name: held.grants for name, held in self._read().items()}

    def grant(self, name: str, pack: str, *, revoke: bool = False) -> tuple[str, ...]:
        """Let ``pack`` receive ``name`` (or no longer, ``revoke``); the packs it is granted
        to now."""
        data = self._read()
        held = data.get(name)
        if held is None:
            raise SecretError(f"no secret named '{name}': store it first (inline secrets set)")
        packs = set(held.grants) - {pack} if revoke else set(held.grants) | {pack}
        data[name] = Secret(held.value, held.service, tuple(sorted(packs)))
        self._write(data)
        return data[name].grants

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

    def set(
        self, name: str, value: str, service: str | None = None, grants: tuple[str, ...] = ()
    ) -> str | None:
        """Store (or replace) ``name`` for ``service`` (inferred from a well-known name when
        None), granted to ``grants`` beside what it was granted before (and to the ``hosted``
        pack for its services); the service recorded."""
        check_secret_name(name)
        if service is not None:
            check_service(service)
        if not value:
            raise SecretError(f"the value of '{name}' is empty")
        data = self._read()
        kept = data[name].grants if name in data else ()
        chosen = service or infer_service(name)
        packs = sorted({*kept, *grants, *_default_grants(chosen)})
        data[name] = Secret(value, chosen, tuple(packs))
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


def secrets_for_call(
    data_dir: Path, params: Mapping[str, Any], node_type: str, pack: str
) -> dict[str, str]:
    """The secrets one call of ``node_type`` (of ``pack``) gets: those its params name that the
    store holds for the node's service and grants to ``pack``. One missing, or stored for
    another service, is left out (the node's ``ctx.secret`` then names it in its error); one
    held for the service but not granted to the pack refuses the call (``SecretNotGranted``)."""
    names = named_secrets(params)
    if not names:
        return {}
    try:
        held = SecretStore(data_dir)._read()
    except SecretError:
        return {}
    service = node_service(node_type)
    out: dict[str, str] = {}
    for n in names:
        if n not in held or held[n].service != service:
            continue
        if pack not in held[n].grants:
            raise SecretNotGranted(pack, n)
        out[n] = held[n].value
    return out


def secrets_reader(data_dir: Path) -> Callable[[Mapping[str, Any], str, str], dict[str, str]]:
    """``secrets_for_call`` over the store of ``data_dir``: what the supervisor is handed."""
    return lambda params, node_type, pack: secrets_for_call(data_dir, params, node_type, pack)
