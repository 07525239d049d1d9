"""``inline pack ...``: install, upgrade, rollback, remove, list, sync, scan and scaffold packs.

Every command prints its progress to stderr (``[3/8] scan ...``) and its result to stdout; a
failure prints ``error:`` with the reason (and the pack's traceback when its code failed) and
exits 1 (3 when the install only needs ``--allow RULE``). Nothing is changed by a failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from inline_registry import (
    RULES,
    InstallResult,
    PackManager,
    PackRow,
    RegistryError,
    ScanRefused,
    Step,
    scaffold_pack,
)

from .._settings import Settings

EXIT_FAILED = 1
EXIT_NEEDS_CONSENT = 3
CHANGING = ("install", "upgrade", "rollback", "remove", "sync")


class StepPrinter:
    """Prints manager steps: ``[i/n] phase  message`` (one line each; a tty redraws nothing)."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.phase = ""

    def __call__(self, step: Step) -> None:
        self.phase = step.phase
        counter = f"[{step.index}/{step.total}] " if step.index else ""
        self.out.write(f"{counter}{step.phase:<9} {step.message}\n")
        self.out.flush()


def add_pack_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pack`` and its subcommands to the ``inline`` command's subparsers."""
    pack = subparsers.add_parser(
        "pack",
        help="install, upgrade, roll back, remove, list, sync and create packs",
        description="Manage packs: each installed version lives in its own uv venv, side by "
        "side; packs.lock records every venv's exact dependencies with hashes.",
    )
    sub = pack.add_subparsers(dest="pack_command", required=True, metavar="COMMAND")
    rules = ", ".join(r for r, (sev, _) in RULES.items() if sev == "consent")

    def consent_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--allow",
            action="append",
            default=[],
            metavar="RULE",
            help=f"consent to a scan finding (repeatable; rules: {rules})",
        )
        p.add_argument(
            "--allow-local-sources",
            action="store_true",
            default=None,
            help="accept -e/-r/-c, --find-links, --index-url, file:// and direct URL "
            "requirements (refused by default)",
        )

    install = sub.add_parser(
        "install",
        help="install a pack from a folder, a wheel, NAME==VERSION or a git URL",
        description="Install a pack. SOURCE is a local folder, a .whl file, NAME==VERSION "
        "from the package index, or a git URL (https://, git@, file://) exported at --ref. "
        "Installing a newer version of an installed pack switches to it (the old one is "
        "kept for rollback).",
    )
    install.add_argument("source", metavar="SOURCE")
    install.add_argument(
        "--ref", help="git: a tag, branch or commit, or 'latest' (the newest vX.Y.Z tag)"
    )
    consent_args(install)

    upgrade = sub.add_parser(
        "upgrade",
        help="install the newest (or --to) version from where the pack came from",
        description="Upgrade an installed pack from its recorded source; the current version "
        "stays for rollback. Consents given before carry over.",
    )
    upgrade.add_argument("name", metavar="NAME")
    upgrade.add_argument("--to", metavar="VERSION", help="the version (git: tag) to install")
    consent_args(upgrade)

    rollback = sub.add_parser(
        "rollback",
        help="switch back to the version that was active before",
        description="Switch back to the previous version (its venv is checked against the "
        "lock and rebuilt if it differs); the version rolled back from becomes the target of "
        "the next rollback.",
    )
    rollback.add_argument("name", metavar="NAME")

    remove = sub.add_parser("remove", help="uninstall a pack (every version)")
    remove.add_argument("name", metavar="NAME")

    lst = sub.add_parser(
        "list",
        help="packs: name, version, SDK, node ids, venv size, state",
        description="List first-party, linked (INLINE_PACK_PATHS) and installed packs; no "
        "worker is started.",
    )
    lst.add_argument("--json", action="store_true", help="print JSON")

    sub.add_parser(
        "sync",
        help="rebuild every venv exactly from packs.lock",
        description="Check every venv against packs.lock and rebuild the ones that differ "
        "(hashes required); remove what the lock no longer names.",
    )

    scan = sub.add_parser(
        "scan",
        help="report what a pack's source does, without installing it",
        description="Fetch SOURCE into a scratch folder and print the static scan's report.",
    )
    scan.add_argument("source", metavar="SOURCE")
    scan.add_argument("--ref", help="git: a tag, branch or commit, or 'latest'")
    scan.add_argument("--json", action="store_true", help="print JSON")

    for verb in ("enable", "disable"):
        switch = sub.add_parser(verb, help=f"{verb} one node type (served after a reload)")
        switch.add_argument("node_type", metavar="NODE_TYPE")

    new = sub.add_parser(
        "new",
        help="scaffold a third-party pack that installs and runs unchanged",
        description="Write NAME/ (pyproject with the entry point, the node NAME/hello with "
        "param 'name' and output 'text', one test, a README).",
    )
    new.add_argument("name", metavar="NAME")
    new.add_argument("--dir", default=".", help="the folder to create NAME/ in (default: .)")
    return pack


def run_pack(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run one ``inline pack`` subcommand; its exit code."""
    printer = StepPrinter(err)
    settings = Settings.from_env()
    manager = PackManager(settings.data_dir, extra=settings.extra_packs, progress=printer)
    command = args.pack_command
    try:
        if command == "install":
            result = manager.install(
                args.source,
                ref=args.ref,
                allow=args.allow,
                allow_local_sources=bool(args.allow_local_sources),
            )
            _print_result("installed", result, out)
            _print_grants(settings, result, out)
        elif command == "upgrade":
            result = manager.upgrade(
                args.name,
                to=args.to,
                allow=args.allow,
                allow_local_sources=args.allow_local_sources,
            )
            _print_result("upgraded", result, out)
            _print_grants(settings, result, out)
        elif command == "rollback":
            _print_result("rolled back", manager.rollback(args.name), out)
        elif command == "remove":
            manager.remove(args.name)
            out.write(f"removed {args.name}\n")
        elif command == "list":
            _print_rows(manager.list(), out, as_json=args.json)
        elif command == "sync":
            for res in manager.sync():
                out.write(f"{res.name:<20} {res.version:<12} {res.action}\n")
        elif command == "scan":
            report = manager.scan(args.source, ref=args.ref)
            if args.json:
                import msgspec

                out.write(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
                out.write("\n")
            else:
                out.write(report.render() + "\n")
        elif command in ("enable", "disable"):
            manager.set_node_enabled(args.node_type, command == "enable")
            out.write(f"{args.node_type}: {command}d\n")
        elif command == "new":
            root = scaffold_pack(args.name, Path(args.dir))
            out.write(f"{root}\n")
            err.write(
                f"created pack '{args.name}' (node {args.name}/hello); install it with: "
                f"inline pack install {root}\n"
            )
        else:  # pragma: no cover - argparse refuses unknown commands
            return EXIT_FAILED
    except ScanRefused as exc:
        err.write(f"error: {exc}\n")
        if not exc.blocked:
            return EXIT_NEEDS_CONSENT
        return EXIT_FAILED
    except RegistryError as exc:
        where = f" at step '{printer.phase}'" if printer.phase and command in CHANGING else ""
        err.write(f"error: {command} failed{where}: {exc}\n")
        if command in CHANGING:
            err.write("Nothing was changed: the packs are as they were before.\n")
        return EXIT_FAILED
    return 0


def _print_result(verb: str, result: InstallResult, out: TextIO) -> None:
    if not result.changed:
        out.write(f"{result.name} {result.version} is already installed and active\n")
        return
    was = f" (was {result.previous})" if result.previous else ""
    out.write(f"{verb} {result.name} {result.version} [{result.dir}]{was}\n")
    out.write(f"  nodes: {', '.join(result.node_types) or '-'}\n")
    if result.scan is not None:
        out.write("  " + result.scan.render().replace("\n", "\n  ") + "\n")
        if result.scan.consents:
            out.write(f"  consents: {', '.join(result.scan.consents)}\n")


def _print_grants(settings: Settings, result: InstallResult, out: TextIO) -> None:
    """The secrets the pack's nodes name by default, and whether the pack is granted each (a
    secret reaches a pack only by grant): shown with the scan, at install and upgrade."""
    from inline_registry import load_registry

    from ..hub import SECRET_PARAM_SUFFIX, SecretStore

    registry = load_registry(settings.packs_dir, settings.extra_packs)
    wanted: dict[str, list[str]] = {}
    for node_type in result.node_types:
        entry = registry.lookup(node_type)
        for param in entry.descriptor.params if entry is not None else ():
            default = param.default
            if param.key.endswith(SECRET_PARAM_SUFFIX) and isinstance(default, str) and default:
                wanted.setdefault(default, []).append(f"{node_type} {param.key}")
    if not wanted:
        return
    grants = SecretStore(settings.data_dir).grants()
    for secret, where in sorted(wanted.items()):
        named = f"  secret {secret} ({', '.join(where)})"
        if result.name in grants.get(secret, ()):
            out.write(f"{named}: granted\n")
        else:
            out.write(
                f"{named}: not granted; its nodes get it only after: "
                f"inline secrets grant {secret} {result.name}\n"
            )


def row_json(row: PackRow) -> dict[str, Any]:
    """A ``list`` row as JSON (the keys the HTTP layer serves too)."""
    return {
        "name": row.name,
        "version": row.version,
        "sdk": row.sdk_version,
        "nodes": list(row.node_types),
        "disabled": list(row.disabled),
        "venvBytes": row.size_bytes,
        "state": row.state,
        "source": row.source,
        "dir": row.dir,
    }


def _print_rows(rows: list[PackRow], out: TextIO, *, as_json: bool) -> None:
    if as_json:
        out.write(json.dumps([row_json(r) for r in rows], indent=2) + "\n")
        return
    out.write(format_rows(rows))


def format_rows(rows: list[PackRow]) -> str:
    """The table of ``pack list``: columns as wide as their widest cell; a pack's previous
    version (its rollback target) on its own row, marked ``previous``, under the active one."""
    table = [("NAME", "VERSION", "SDK", "VENV", "STATE", "NODES")]
    for r in rows:
        size = f"{r.size_bytes / 1e6:.1f} MB" if r.size_bytes else "-"
        nodes = ", ".join(t + " (off)" if t in r.disabled else t for t in r.node_types)
        name = r.name if not r.state.startswith("previous") else f"{r.name} (previous)"
        table.append((name, r.version, r.sdk_version, size, r.state, nodes or "-"))
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    lines = []
    for row in table:
        cells = [row[i].rjust(widths[i]) if i == 3 else row[i].ljust(widths[i]) for i in range(5)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines) + "\n"
