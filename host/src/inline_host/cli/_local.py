"""``inline models list``, ``inline models show NAME`` and ``inline models remove NAME``.

With a server running they ask it (``/v1/models/local``): it knows which models a deployment
serves or a run uses, and refuses to remove those unless ``--force`` (which undeploys and
cancels them). With none, they read and change the models dir themselves."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

import msgspec

from .._settings import Settings
from ..hub import origin_of
from ..importers import LocalModel, ModelNotFound, find_local, list_local, remove_local
from ._deploy import _call, _failed
from ._run import EXIT_INVALID


def add_local_parsers(models_sub: Any) -> None:
    ls = models_sub.add_parser("list", help="the models of this machine: category, size, source")
    ls.add_argument("--json", action="store_true")
    show = models_sub.add_parser("show", help="a model's card (inline.json), each field's origin")
    show.add_argument("name", help="a model's name (FOLDER/NAME where two folders hold one)")
    show.add_argument("--json", action="store_true")
    rm = models_sub.add_parser("remove", help="delete a model (refused while it is in use)")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true",
                    help="undeploy the deployments and cancel the runs that use it")  # fmt: skip


def _ask(settings: Settings, method: str, path: str) -> tuple[int, Any] | None:
    """The server's answer, or None when no server answers (then the CLI works alone)."""
    status, answer = _call(settings, method, path, None, 120)
    return None if status == 0 else (status, answer)


def run_local(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    models_dir = settings.models_dir
    if args.models_command == "list":
        served = _ask(settings, "GET", "/v1/models/local")
        if served is not None and served[0] != 200:
            return _failed(*served)
        models = (msgspec.convert(served[1]["models"], list[LocalModel]) if served
                  else list_local(models_dir))  # fmt: skip
        if args.json:
            print(json.dumps(msgspec.to_builtins(models), indent=2))
        else:
            print(_table(models) if models else f"no models in {models_dir}")
        return 0
    path = f"/v1/models/local/{quote(args.name, safe='/')}"
    if args.models_command == "show":
        served = _ask(settings, "GET", path)
        if served is not None and served[0] != 200:
            return _failed(*served)
        try:
            model = (msgspec.convert(served[1], LocalModel) if served
                     else find_local(models_dir, args.name))  # fmt: skip
        except ModelNotFound as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        print(json.dumps(msgspec.to_builtins(model), indent=2) if args.json else _card(model))
        return 0
    served = _ask(settings, "DELETE", path + ("?force=true" if args.force else ""))
    if served is not None:
        if served[0] != 200:
            return _failed(*served)
        print(f"removed {served[1]['folder']}/{served[1]['name']}")
        return 0
    try:
        model = find_local(models_dir, args.name)
    except ModelNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    remove_local(models_dir, model)
    print(f"removed {model.folder}/{model.name}")
    return 0


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _table(models: list[LocalModel]) -> str:
    head = ("NAME", "CATEGORY", "SIZE", "SOURCE", "COMPLETE", "DEPLOYED")
    rows = [head] + [(f"{m.folder}/{m.name}", m.category, _size(m.bytes), m.source or "-",
                      "yes" if m.complete else "no", "yes" if m.deployed else "no")
                     for m in models]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)  # fmt: skip


def _flat(card: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in card.items():
        if key == "origin" and not prefix:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _flat(value, path + ".")
        else:
            out.append((path, value))
    return out


def _card(model: LocalModel) -> str:
    lines = [f"{model.folder}/{model.name}: {model.category}, {_size(model.bytes)}, "
             f"{'complete' if model.complete else 'incomplete'}"
             f"{', deployed' if model.deployed else ''}", f"  {model.path}"]  # fmt: skip
    card = model.card or {}
    if not card:
        lines.append("  no card (inline.json): import it, or write one")
    for path, value in _flat(card):
        lines.append(f"  {path} = {json.dumps(value)}  ({origin_of(card, path)})")
    return "\n".join(lines)
