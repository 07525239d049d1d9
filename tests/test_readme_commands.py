"""Issue 26 item 6: every shell command in the README's ``sh`` blocks (and its inline ``curl``
commands) either runs here, as written, or is listed in ``NOT_HERE`` with why it can't run on
an offline CPU machine. A command added to the README fails this test until it is one or the
other.

Commands run in a scratch folder that looks like a checkout (``.venv`` and ``examples`` linked
in), with a data dir, models dir and home of their own. Only what would touch this machine's
shared state is adapted: the ports servers listen on, and ``--out`` folders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ._ports import free_port
from .test_readme import wait_for

pytestmark = pytest.mark.slow  # a pack install and three servers: minutes

ROOT = Path(__file__).resolve().parents[1]
COMFY = ROOT / "tests" / "data" / "comfyui"

#: Commands run elsewhere in the suite or that can't run here (by prefix), and why.
NOT_HERE: dict[str, str] = {
    ".venv/bin/inline demo models": "tests/newcomer/test_demo_models.py runs it, once a session",
    ".venv/bin/python examples/run.py": "tests/newcomer/test_examples.py runs every example",
    "./scripts/test": "the suite itself",
    "./scripts/run": "tests/test_readme.py serves /v1 with it",
    "./webui.sh --listen": "listens beyond loopback (tests bind loopback only)",
    "./webui.sh --ray": "needs a Ray cluster at that address (tests/ray start their own)",
    "python main.py --front-end-root ../studio/dist": "needs Studio's build next to the checkout",
    ".venv/bin/inline models pull": "fetches from the Hugging Face Hub",
    ".venv/bin/inline models import hf:": "fetches from the Hugging Face Hub",
    ".venv/bin/inline models estimate hf:": "reads the Hugging Face Hub",
    ".venv/bin/inline models import url:https://host/": "a placeholder URL",
    ".venv/bin/inline models import file:/data/my-finetune": "a placeholder folder",
    ".venv/bin/inline models estimate models/llm/Qwen3-0.6B": "needs Qwen3-0.6B imported",
    ".venv/bin/inline models show Qwen3-0.6B": "needs Qwen3-0.6B imported",
    ".venv/bin/inline models remove Qwen3-0.6B": "needs Qwen3-0.6B imported",
    ".venv/bin/inline import comfyui workflow.json --one-click --run": "renders a full Z-Image",
    ".venv/bin/inline pack install dist/": "needs a built wheel of the pack",
    ".venv/bin/inline pack install inline-pack-acme==": "acme is not on the package index",
    ".venv/bin/inline pack install https://example.org/": "a placeholder repository",
    ".venv/bin/inline pack upgrade acme": "needs a newer version of acme to upgrade to",
    ".venv/bin/inline pack rollback acme": "needs two installed versions of acme",
    ".venv/bin/inline pack sync": "rebuilds every pack's torch venv (minutes)",
    ".venv/bin/inline pack scan SOURCE": "SOURCE is a placeholder (`pack scan` runs below)",
    "inline deploy": "needs a server with the test pack (tests/api/test_deployments.py)",
    "inline deployments": "needs a server with deployments (tests/api/test_deployments.py)",
    "inline undeploy": "needs a server with deployments (tests/api/test_deployments.py)",
    ".venv/bin/python bench/": "a benchmark: minutes each, run by hand (bench/README)",
    "python bench/gpu_": "CUDA only",
}


def readme_commands() -> list[str]:
    """Every command line of the README's ``sh`` blocks (comments dropped), and its inline
    ``curl ...`` commands."""
    text = (ROOT / "README.md").read_text()
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                out.append(command)
    out += re.findall(r"`(curl [^`]*http[^`]+)`", text)
    return out


def expand(command: str) -> list[str]:
    """A command with ``[--flag]`` optional parts: without them, then with each."""
    optional = re.findall(r" \[([^\]]+)\]", command)
    bare = re.sub(r" \[[^\]]+\]", "", command)
    return [bare] + [f"{bare} {o}" for o in optional]


def not_here(command: str) -> str | None:
    return next((why for prefix, why in NOT_HERE.items() if command.startswith(prefix)), None)


@dataclass
class Checkout:
    """A scratch folder to run README commands in, and their environment."""

    cwd: Path
    env: dict[str, str]

    def run(self, command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=600,
        )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    (cwd / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (cwd / "home").mkdir()
    shutil.copy(ROOT / "examples" / "assets" / "sunrise.png", cwd / "photo.png")
    shutil.copy(COMFY / "z_image_turbo_example.ui.json", cwd / "workflow.json")
    shutil.copy(COMFY / "community" / "zimage_turbo_lora_dangling.embedded.png", cwd / "render.png")
    env = {
        **os.environ,
        "HOME": str(cwd / "home"),
        "INLINE_DATA_DIR": str(cwd / ".inline"),
        "INLINE_MODELS_DIR": str(cwd / "models"),
    }
    for name in ("INLINE_PACK_PATHS", "INLINE_PORT", "INLINE_TOKEN"):
        env.pop(name, None)
    return Checkout(cwd, env)


def ok(proc: subprocess.CompletedProcess[str], command: str) -> str:
    assert proc.returncode == 0, (
        command,
        proc.returncode,
        proc.stdout[-2000:],
        proc.stderr[-3000:],
    )
    assert "Traceback" not in proc.stderr, (command, proc.stderr[-3000:])
    return proc.stdout


#: The commands run one after another in the scratch checkout (each exits 0), with what each
#: must print or leave behind.
IN_ORDER: list[tuple[str, Callable[[str, Checkout], bool]]] = [
    (".venv/bin/inline run examples/basics.json --out out/",
     lambda out, c: out == "out/thumb.image.png\n" and (c.cwd / out.strip()).is_file()),
    (".venv/bin/inline run examples/basics.json --target prompt",
     lambda out, c: (c.cwd / out.strip()).read_text() == "a red bicycle on a beach at sunrise"),
    (".venv/bin/inline assets add photo.png",
     lambda out, c: re.fullmatch(r"sha256-[0-9a-f]{64}\n", out) is not None),
    (".venv/bin/inline nodes", lambda out, c: "image/resize" in out),
    (".venv/bin/inline nodes --json",
     lambda out, c: "image/resize" in {d["type"] for d in json.loads(out)}),
    (".venv/bin/inline nodes image/resize", lambda out, c: out.startswith("image/resize")),
    (".venv/bin/inline --version", lambda out, c: "sdk" in out.lower()),
    (".venv/bin/inline import comfyui workflow.json --out graph.json",
     lambda out, c: json.loads((c.cwd / "graph.json").read_text())["target"] == "8"),
    (".venv/bin/inline import comfyui render.png --json",
     lambda out, c: json.loads(out)["report"]["complete"] is True),
    (".venv/bin/inline models sources", lambda out, c: "hf:" in out and "file:" in out),
    (".venv/bin/inline models list", lambda out, c: True),
    (".venv/bin/inline secrets set ANTHROPIC_API_KEY", lambda out, c: True),
    (".venv/bin/inline secrets set ACME_KEY --service acme", lambda out, c: True),
    (".venv/bin/inline secrets list",
     lambda out, c: "ANTHROPIC_API_KEY" in out and "ACME_KEY" in out and "sk-readme" not in out),
    (".venv/bin/inline secrets grant ACME_KEY acmepack", lambda out, c: True),
    (".venv/bin/inline secrets remove ANTHROPIC_API_KEY", lambda out, c: True),
    (".venv/bin/inline pack new acme --dir ~/src",
     lambda out, c: (c.cwd / "home" / "src" / "acme" / "pyproject.toml").is_file()),
    (".venv/bin/inline pack install ~/src/acme", lambda out, c: True),
    (".venv/bin/inline pack list", lambda out, c: "acme" in out and "acme/hello" in out),
    (".venv/bin/inline pack list --json",
     lambda out, c: "acme" in {p["name"] for p in json.loads(out)}),
    (".venv/bin/inline pack disable acme/hello", lambda out, c: "disabled" in out),
    (".venv/bin/inline pack remove acme", lambda out, c: "removed acme" in out),
]  # fmt: skip
#: What the commands that read stdin are given (a secret's value).
STDIN: dict[str, str] = {
    ".venv/bin/inline secrets set ANTHROPIC_API_KEY": "sk-readme\n",
    ".venv/bin/inline secrets set ACME_KEY --service acme": "acme-readme\n",
}
#: Servers, each started as written on a free port, then asked for its health.
SERVERS: tuple[str, ...] = (
    "./webui.sh",
    "python -m inline_host",
    ".venv/bin/inline serve --port 8849",
)


def test_every_readme_command_runs_here_or_says_why_not() -> None:
    handled = {c for c, _ in IN_ORDER} | set(SERVERS)
    for command in readme_commands():
        for variant in expand(command):
            if variant.startswith("curl "):
                continue  # every inline curl runs in the server test below
            assert variant in handled or not_here(variant), (
                f"README command {variant!r} is neither run by tests/test_readme_commands.py "
                "nor listed in its NOT_HERE with why it can't run here"
            )


def test_the_readme_cli_commands_run_as_written(checkout: Checkout) -> None:
    listed = {v for c in readme_commands() for v in expand(c)}
    for command, check in IN_ORDER:
        assert command in listed, f"{command!r} is no longer in the README: drop it here"
        out = ok(checkout.run(command, STDIN.get(command, "")), command)
        assert check(out, checkout), (command, out[-2000:])


@pytest.mark.parametrize("command", SERVERS)
def test_the_readme_servers_serve_and_its_curl_commands_work(
    checkout: Checkout, command: str
) -> None:
    port = free_port()
    env = {**checkout.env, "INLINE_PORT": str(port)}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # an active venv
    cwd = ROOT if command.startswith("./") else checkout.cwd
    proc = subprocess.Popen(
        ["bash", "-c", "exec " + command.replace("8849", str(port))],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        health = wait_for(f"http://127.0.0.1:{port}/v1/health", proc)
        assert health["ok"] is True
        if command != SERVERS[-1]:
            return
        curls = [c for c in readme_commands() if c.startswith("curl ")]
        assert len(curls) >= 2, curls
        for curl in curls:  # the README's own, against this server
            line = curl.replace("127.0.0.1:8848", f"127.0.0.1:{port}")
            answer = json.loads(ok(checkout.run(line + " --fail-with-body -sS"), line))
            assert "id" in answer or "graph" in answer, (curl, answer)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
