"""``inline secrets set|list|remove|grant|revoke``: keys held by name, never given on the
command line, each for one service (``--service``, inferred for well-known names), reaching only
the packs they are granted to."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from .._settings import Settings
from ..hub import SecretError, SecretStore, check_secret_name, check_service


def add_secrets_parser(subparsers: Any) -> None:
    """Add ``inline secrets ...`` to the CLI's subcommands."""
    secrets = subparsers.add_parser("secrets", help="API keys and tokens, held by name")
    sub = secrets.add_subparsers(dest="secrets_command", required=True)
    put = sub.add_parser("set", help="store a secret; its value is read from stdin or a prompt")
    put.add_argument("name", help="e.g. ANTHROPIC_API_KEY")
    put.add_argument("--service", metavar="NAME",
                     help="what it may be used for: hf (the Hub), anthropic, google, openai, or "
                          "the namespace of the nodes that use it; inferred for HF_*, "
                          "ANTHROPIC_*, GEMINI_*, GOOGLE_*, OPENAI_*")  # fmt: skip
    put.add_argument("--grant", action="append", default=[], metavar="PACK",
                     help="let PACK's nodes receive it (repeatable; an anthropic or google key "
                          "is granted to the first-party hosted pack)")  # fmt: skip
    sub.add_parser("list", help="the stored secrets: name, service, packs granted (no value)")
    for verb, what in (("grant", "let a pack's nodes receive a secret"),
                       ("revoke", "no longer send a secret to a pack")):  # fmt: skip
        g = sub.add_parser(verb, help=what)
        g.add_argument("name")
        g.add_argument("pack")
    rm = sub.add_parser("remove", help="forget a secret")
    rm.add_argument("name")


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(f"Value of {name}: ")
    return sys.stdin.read().strip("\r\n")


def run_secrets(args: argparse.Namespace) -> int:
    """Run ``inline secrets ...``; the exit code."""
    store = SecretStore(Settings.from_env().data_dir)
    try:
        if args.secrets_command == "list":
            services, grants = store.services(), store.grants()
            for name in sorted(services):
                packs = ", ".join(grants.get(name, ())) or "no pack"
                print(f"{name}  for {services[name] or 'no service'}, granted to {packs}")
            return 0
        if args.secrets_command in ("grant", "revoke"):
            packs = store.grant(args.name, args.pack, revoke=args.secrets_command == "revoke")
            print(f"{args.name}: granted to {', '.join(packs) or 'no pack'}", file=sys.stderr)
            return 0
        if args.secrets_command == "set":
            check_secret_name(args.name)
            if args.service is not None:
                check_service(args.service)
            service = store.set(args.name, _read_value(args.name), args.service,
                                tuple(args.grant))  # fmt: skip
            if service is None:
                print(f"stored secret '{args.name}' in {store.path}, for no service: nothing "
                      "uses it until it is set again with --service NAME (hf, anthropic, "
                      "google, openai, or a node namespace)", file=sys.stderr)  # fmt: skip
            else:
                print(f"stored secret '{args.name}' for '{service}' in {store.path}",
                      file=sys.stderr)  # fmt: skip
            return 0
        if args.secrets_command == "remove":
            if not store.remove(args.name):
                print(f"error: no secret named '{args.name}'", file=sys.stderr)
                return 1
            print(f"removed secret '{args.name}'", file=sys.stderr)
            return 0
    except SecretError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2
