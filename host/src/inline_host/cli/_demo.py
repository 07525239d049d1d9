"""``inline demo models [--only FAMILY]``: tiny random-weight models of every family, built on
this machine (nothing is downloaded) by builders that ship in the packs, written into the
models dir and marked as demo on their cards (``"demo": true``) and in pickers.

The host never imports torch: each pack's builder (``python -m inline_<pack>._demo``) runs in
that pack's own venv, sandboxed like an install-time handshake (its venv, a scratch folder, no
network), and writes into its scratch under ``models/.downloads/demo/``; each entry is then
moved into place whole (a rename), so an interrupted run leaves no half-written model. An entry
already present is kept as it is: the command is idempotent, and a family whose entries are all
present builds nothing (and needs no venv).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from inline_registry import (
    Confinement,
    RegistryError,
    apply_env,
    confined_command,
    load_registry,
    prepare_env,
    sandbox_mode,
    sandbox_problem,
    worker_env,
)

from .._settings import Settings
from ..hub import STAGING, write_card
from ._run import EXIT_FAILED

#: The card key that marks a demo model (the pickers label such entries "(demo)").
DEMO: Final = "demo"
#: What the card records as the model's source.
SOURCE: Final = "inline demo models"


@dataclass(frozen=True, slots=True)
class Family:
    """One family of demo models: the pack whose venv builds it, its builder module and the
    entries (``category/name`` under the models dir) it writes."""

    name: str
    pack: str
    module: str
    entries: tuple[str, ...]
    about: str


FAMILIES: Final = (
    Family("llm", "text", "inline_text._demo", ("llm/demo-qwen3",),
           "a Qwen3-style causal LM for text/complete (tools, thinking)"),
    Family("seq2seq", "text", "inline_text._demo", ("llm/demo-t5",),
           "a T5 encoder-decoder for text/rewrite"),
    Family("embed", "text", "inline_text._demo", ("embeddings/demo-embed",),
           "a sentence-transformers encoder for text/embed"),
    Family("zimage", "zimage", "inline_zimage._demo",
           ("diffusion_models/demo_z_image_turbo.safetensors", "vae/demo_ae.safetensors",
            "text_encoders/demo_qwen3.safetensors", "text_encoders/demo_qwen3_tokenizer",
            "loras/demo_lora.safetensors"),
           "a Z-Image (transformer, VAE, Qwen3 text encoder, a LoRA) for alibaba/z-image-turbo "
           "and the primitive graph"),
    Family("diffusers", "diffusers", "inline_diffusers._demo",
           ("diffusers/demo-sd", "checkpoints/demo-sd.safetensors"),
           "a Stable Diffusion pipeline folder for diffusers/generate (and img2img), and the "
           "same weights as a single-file checkpoint (ComfyUI's CheckpointLoaderSimple)"),
)  # fmt: skip
#: Families whose nodes load no model: named by ``--only`` and said so, nothing written.
MODELLESS: Final = {"mesh": "mesh/relief is geometry, not a learned model: nothing to write"}
#: A builder's whole budget (a torch import and a few hundred optimiser steps on two cores).
BUILD_TIMEOUT: Final = 900.0


def add_demo_parser(subparsers: Any) -> None:
    """Add ``inline demo models`` to the CLI's subcommands."""
    demo = subparsers.add_parser("demo", help="tiny demo models, built here (no download)")
    sub = demo.add_subparsers(dest="demo_command", required=True)
    names = [f.name for f in FAMILIES] + list(MODELLESS)
    models = sub.add_parser(
        "models",
        help="write tiny random-weight models of every family into the models dir",
        description="Build tiny random-weight models of every family with the packs' own "
        "builders (in each pack's venv) and write them into the models dir, marked as demo. "
        "Families: " + "; ".join(f"{f.name}: {f.about}" for f in FAMILIES) + ".",
    )
    models.add_argument("--only", action="append", choices=names, metavar="FAMILY",
                        help=f"only this family (repeatable): {', '.join(names)}")  # fmt: skip


def run_demo(args: argparse.Namespace) -> int:
    """Run ``inline demo models``; the exit code."""
    settings = Settings.from_env()
    wanted = set(args.only or [*(f.name for f in FAMILIES), *MODELLESS])
    for name in sorted(wanted & set(MODELLESS)):
        print(f"{name}: {MODELLESS[name]}", file=sys.stderr)
    chosen = [f for f in FAMILIES if f.name in wanted]
    try:
        written = write_demo_models(settings, chosen)
    except DemoFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    models = settings.models_dir
    if written:
        print(f"Demo models in {models}: {', '.join(written)}", file=sys.stderr)
    return 0


class DemoFailed(Exception):
    """A demo model could not be built or put in place (the message says which and why)."""


def write_demo_models(settings: Settings, families: Sequence[Family]) -> list[str]:
    """Build what ``families`` miss in the models dir, one builder run per pack; the entries
    written (``category/name``). Progress goes to stderr, a line a step."""
    models = settings.models_dir
    todo: dict[str, list[Family]] = {}
    for family in families:
        missing = [e for e in family.entries if not (models / e).exists()]
        if not missing:
            print(f"{family.name}: present ({', '.join(family.entries)})", file=sys.stderr)
            continue
        todo.setdefault(family.pack, []).append(family)
    if not todo:
        return []
    try:
        registry = load_registry(settings.packs_dir, settings.extra_packs, say=_say)
    except RegistryError as exc:
        raise DemoFailed(str(exc)) from None
    written: list[str] = []
    for pack, group in todo.items():
        info = registry.packs.get(pack)
        if info is None:
            why = registry.failed.get(pack, "it is not registered")
            raise DemoFailed(f"the demo models of {_names(group)} need pack '{pack}': {why}")
        try:
            env = prepare_env(info.env, say=_say)
        except RegistryError as exc:
            raise DemoFailed(str(exc)) from None
        written += _build(env.python, env.source.first_party, pack, group, models)
    return written


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _names(group: Sequence[Family]) -> str:
    return ", ".join(f.name for f in group)


def _build(
    python: Path, first_party: bool, pack: str, group: Sequence[Family], models: Path
) -> list[str]:
    """Run the pack's builder for ``group`` in its venv, then move each missing entry in."""
    _say(f"{_names(group)}: building with pack '{pack}' (tiny random weights, on this machine)")
    scratch = models / STAGING / "demo" / f"{pack}-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        # "out" is relative: the builder runs in its scratch, sandboxed or not
        command = [str(python), "-m", group[0].module, "out", *(f.name for f in group)]
        variables = worker_env({"TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1"})
        confinement = _confinement(python, scratch, first_party)
        if confinement is not None:
            command, changes = confined_command(command, confinement)
            variables = apply_env(variables, changes)
        _run_builder(command, variables, scratch, pack)
        written = []
        for family in group:
            for entry in family.entries:
                built, dest = scratch / "out" / entry, models / entry
                if dest.exists():
                    continue  # present: kept as it is
                if not built.exists():
                    raise DemoFailed(f"pack '{pack}': its demo builder wrote no {entry}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(built, dest)
                _mark(dest, family, entry.split("/", 1)[0])
                written.append(entry)
            _say(f"{family.name}: written ({', '.join(family.entries)})")
        return written
    except OSError as exc:
        raise DemoFailed(f"cannot put the demo models in {models}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _confinement(python: Path, scratch: Path, first_party: bool) -> Confinement | None:
    """The sandbox of a builder: what an install-time handshake gets (its venv, its scratch,
    no network, no GPU); None when the sandbox is off or unavailable for a first-party pack."""
    mode = sandbox_mode()
    if mode == "off":
        return None
    problem = sandbox_problem()
    if problem is not None:
        if mode == "required" or not first_party:
            raise DemoFailed(f"{problem}; to build the demo models unsandboxed: INLINE_SANDBOX=off")
        return None
    return Confinement(venv=python.parent.parent, scratch=scratch, gpus=False)


def _run_builder(command: list[str], variables: dict[str, str], cwd: Path, pack: str) -> None:
    """Run a builder, its progress lines passed on; ``DemoFailed`` with its last lines."""
    log = cwd / "builder.log"  # stderr to a file: a pipe nobody reads could stall the builder
    with log.open("w") as err, subprocess.Popen(
        command, cwd=cwd, env=variables, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=err, text=True, start_new_session=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.strip():  # a tokenizer trainer's progress bar leaves blank lines
                    _say(f"  {line.strip()}")
            code = proc.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise DemoFailed(
                f"pack '{pack}': its demo builder ran past {BUILD_TIMEOUT:.0f}s"
            ) from None
        except BaseException:  # Ctrl-C: the builder (in a session of its own) stops too
            proc.kill()
            raise
    stderr = log.read_text(errors="replace")
    if code != 0:
        tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no output"
        raise DemoFailed(f"pack '{pack}': its demo builder exited with code {code}: {tail}")


def _mark(path: Path, family: Family, category: str) -> None:
    """The entry's card says it is a demo model: a folder's ``inline.json``, a single file's
    ``<file>.inline.json`` beside it."""
    fields = {DEMO: True, "source": SOURCE, "category": category, "task": family.name}
    if path.is_dir():
        write_card(path, fields, "demo")
        return
    card = path.with_name(f"{path.name}.inline.json")
    tmp = card.with_name(f".{card.name}.tmp")
    tmp.write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, card)
