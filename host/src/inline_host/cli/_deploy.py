"""``inline deploy``, ``inline undeploy`` and ``inline deployments``: the running server's
``/v1/deployments``, with the operator token from the data dir (or ``INLINE_TOKEN``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from .._settings import Settings
from ..guard import operator_token
from ._run import EXIT_FAILED, EXIT_INVALID

KNOBS = ("target_ongoing", "upscale_delay_s", "downscale_delay_s", "idle_s")


def add_deploy_parsers(subparsers: Any) -> None:
    """Add ``inline deploy``, ``undeploy`` and ``deployments`` to the CLI's subcommands."""
    deploy = subparsers.add_parser(
        "deploy", help="keep a node's pack running on N replicas (or between --min and --max)"
    )
    deploy.add_argument("target", metavar="NODE_OR_MODEL",
                        help="a node type, or a model a node's picker offers")  # fmt: skip
    count = deploy.add_mutually_exclusive_group()
    count.add_argument("--replicas", type=_replicas, metavar="N",
                       help="exactly N replicas, or auto: one per GPU (one without)")  # fmt: skip
    count.add_argument("--min", type=int, metavar="N", help="at least N (0: none when idle)")
    deploy.add_argument("--max", type=int, metavar="M", help="at most M (scaled by the calls)")
    deploy.add_argument("--name", help="the deployment's name (default: from the node)")
    deploy.add_argument("--max-per-node", type=int, metavar="K", dest="max_per_node",
                        help="on a Ray cluster: at most K replicas on one node")  # fmt: skip
    deploy.add_argument("--wait", action="store_true", help="return once every replica is up")
    deploy.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="how long --wait waits (default 600)")  # fmt: skip
    for knob in KNOBS:
        deploy.add_argument(f"--{knob.replace('_', '-')}", type=float, dest=knob,
                            help=f"autoscaling: {knob}")  # fmt: skip
    undeploy = subparsers.add_parser("undeploy", help="stop a deployment's replicas")
    undeploy.add_argument("name")
    subparsers.add_parser("deployments", help="the deployments: replicas, where, state, load")


def _replicas(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number or auto, not {text!r}") from None


def run_deploy(args: argparse.Namespace) -> int:
    """Run one of the three commands; the exit code."""
    settings = Settings.from_env()
    if args.command == "deploy":
        if args.max is not None and args.replicas is not None:
            print("error: give --replicas, or --min and --max, not both", file=sys.stderr)
            return EXIT_INVALID
        body: dict[str, Any] = {"node": args.target}
        for key in ("replicas", "min", "max", "name", "max_per_node", *KNOBS):
            if getattr(args, key) is not None:
                body[key] = getattr(args, key)
        query = f"?wait=true&timeout={args.timeout:g}" if args.wait else ""
        status, answer = _call(settings, "POST", f"/v1/deployments{query}", body, args.timeout)
        if status != 201:
            return _failed(status, answer)
        print(_table([answer]))
        if args.wait and answer.get("state") != "ready":
            print(f"error: not ready within {args.timeout:g} s: {answer.get('state')}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        return 0
    if args.command == "undeploy":
        status, answer = _call(settings, "DELETE", f"/v1/deployments/{args.name}", None, 60)
        if status != 200:
            return _failed(status, answer)
        print(f"undeployed {args.name}")
        return 0
    status, answer = _call(settings, "GET", "/v1/deployments", None, 60)
    if status != 200:
        return _failed(status, answer)
    print(_table(answer["deployments"]) if answer["deployments"] else "no deployments")
    return 0


def _call(settings: Settings, method: str, path: str, body: Any, timeout: float) -> tuple[int, Any]:
    url = f"http://{settings.host}:{settings.port}{path}"
    token = operator_token(settings.data_dir, settings.token)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout + 30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"null")
        except ValueError:
            return exc.code, None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return 0, {"error": {"message": f"no Inline server answers at {url.split('/v1')[0]} "
                             f"({reason}); start one with: inline serve"}}  # fmt: skip


def _failed(status: int, answer: Any) -> int:
    error = answer.get("error", {}) if isinstance(answer, dict) else {}
    print(f"error: {error.get('message') or f'the server answered {status}'}", file=sys.stderr)
    return EXIT_INVALID if status in (404, 409, 422) else EXIT_FAILED


def _table(views: list[dict[str, Any]]) -> str:
    """Name, pack, model, replicas and where, state, load and queue: a row each."""
    head = ("NAME", "PACK", "MODEL", "REPLICAS", "STATE", "LOAD", "QUEUE")
    rows: list[tuple[str, ...]] = [head]
    for v in views:
        wheres = sorted({r["where"] for r in v["replicas"] if r["where"]})
        up = sum(1 for r in v["replicas"] if r["state"] != "starting")
        span = str(v["max"]) if v["min"] == v["max"] else f"{v['min']}..{v['max']}"
        replicas = f"{up}/{v['target']} ({span})" + (f" on {','.join(wheres)}" if wheres else "")
        rows.append((v["name"], v["pack"], v.get("model") or "-", replicas, v["state"],
                     str(v["load"]), str(v["queue"])))  # fmt: skip
        for d in v.get("decisions", [])[-3:]:
            at = time.strftime("%H:%M:%S", time.localtime(d["at"] / 1000))
            rows.append(("", f"  {at} scaled {d['replicasFrom']} -> {d['replicasTo']}",
                         d["reason"], "", "", "", ""))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)  # fmt: skip
