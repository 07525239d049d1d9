"""The static scan: what a pack's source does, read before anything of it is built or installed.

The scan parses every Python file with ``ast`` (nothing is imported or run) and looks at every
other file's name and first bytes. Each finding names a rule, a severity, a file and a line:

- ``critical`` blocks the install: code run at build or install time (``setup.py``, in-tree
  build backends, build hooks), code run at every interpreter start (``.pth``), execution of
  decoded data (obfuscation), vendored copies of the platform (torch, numpy, the SDK), bundled
  CUDA/torch runtimes, links pointing out of the tree.
- ``consent`` needs the operator's ``--allow RULE``: subprocess, ctypes, raw sockets, pickle
  loading, dynamic execution, network access, compiled binaries, unparseable source.
- ``info`` is reported only: model downloads, no license.

The report is kept with the installed version (``scan.json``), with the consents given.
"""

from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path
from typing import Any, Final

import msgspec

CRITICAL: Final = "critical"
CONSENT: Final = "consent"
INFO: Final = "info"

RULES: Final[dict[str, tuple[str, str]]] = {
    "install-time-code-execution": (CRITICAL, "runs code when the pack is built or installed"),
    "startup-code": (CRITICAL, "runs code every time a Python interpreter starts"),
    "obfuscated-execution": (CRITICAL, "executes decoded or assembled code"),
    "host-dependency-override": (CRITICAL, "ships or requires its own copy of the platform"),
    "bundled-native-runtime": (CRITICAL, "bundles a torch/CUDA native runtime"),
    "unsafe-path": (CRITICAL, "a link that points outside the pack"),
    "subprocess": (CONSENT, "starts other programs"),
    "ctypes": (CONSENT, "calls native code through ctypes/cffi"),
    "raw-socket": (CONSENT, "opens raw network sockets"),
    "pickle-deserialization": (CONSENT, "loads pickles (arbitrary code on load)"),
    "dynamic-execution": (CONSENT, "executes code built at run time (exec, eval, imports by name)"),
    "network-egress": (CONSENT, "reaches the network"),
    "sandbox-network": (CONSENT, "declares network = true: its sandboxed workers may go online"),
    "compiled-binary": (CONSENT, "ships compiled binaries the scan cannot read"),
    "unparseable-source": (CONSENT, "has Python files the scan cannot parse"),
    "build-backend": (CONSENT, "builds with a backend outside the known set"),
    "model-download": (INFO, "downloads models (only ever through `inline models pull`)"),
    "no-license": (INFO, "declares no license"),
}

KNOWN_BACKENDS: Final = frozenset(
    {
        "uv_build", "hatchling.build", "setuptools.build_meta", "flit_core.buildapi",
        "pdm.backend", "poetry.core.masonry.api",
    }
)  # fmt: skip
PLATFORM_PACKAGES: Final = frozenset(
    {"torch", "numpy", "inline_sdk", "inline_core", "inline_registry", "inline_host"}
)
NATIVE_RUNTIME: Final = (
    "libtorch", "libc10", "libcuda", "libcudart", "libcudnn", "libcublas", "libnvrtc", "libnccl",
)  # fmt: skip
BINARY_SUFFIXES: Final = (".so", ".pyd", ".dll", ".dylib", ".exe", ".a", ".o")
BINARY_MAGIC: Final = (
    b"\x7fELF", b"MZ", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe",
)  # fmt: skip

SUBPROCESS_MODULES: Final = frozenset({"subprocess", "pty", "pexpect", "sh", "plumbum"})
SUBPROCESS_CALLS: Final = frozenset(
    {
        "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "os.fork", "os.forkpty",
        "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
    }
)  # fmt: skip
CTYPES_MODULES: Final = frozenset({"ctypes", "_ctypes", "cffi"})
SOCKET_MODULES: Final = frozenset({"socket", "_socket", "socketserver"})
NETWORK_MODULES: Final = frozenset(
    {
        "urllib.request", "urllib3", "requests", "httpx", "aiohttp", "http.client", "ftplib",
        "smtplib", "telnetlib", "poplib", "imaplib", "xmlrpc.client", "websocket", "websockets",
        "paramiko", "pycurl", "http.server",
    }
)  # fmt: skip
NETWORK_CALLS: Final = frozenset({"socket.create_connection", "asyncio.open_connection"})
PICKLE_CALLS: Final = frozenset(
    {
        "pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads",
        "cPickle.load", "cPickle.loads", "dill.load", "dill.loads", "cloudpickle.load",
        "cloudpickle.loads", "joblib.load", "shelve.open", "pandas.read_pickle",
    }
)  # fmt: skip
DOWNLOAD_MODULES: Final = frozenset({"huggingface_hub", "modelscope", "gdown", "wget"})
DECODERS: Final = frozenset(
    {
        "base64.b64decode", "base64.b32decode", "base64.b85decode", "base64.a85decode",
        "base64.decodebytes", "base64.urlsafe_b64decode", "zlib.decompress", "bz2.decompress",
        "lzma.decompress", "gzip.decompress", "marshal.loads", "codecs.decode", "bytes.fromhex",
        "binascii.unhexlify", "binascii.a2b_base64", "chr", "rot13",
    }
)  # fmt: skip
EXEC_CALLS: Final = frozenset({"exec", "eval", "compile", "builtins.exec", "builtins.eval"})


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing the scan found."""

    rule: str
    severity: str
    path: str
    line: int = 0
    detail: str = ""


class ScanReport(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the scan found in a pack's source, and the consents it was installed with."""

    files: int
    findings: tuple[Finding, ...] = ()
    consents: tuple[str, ...] = ()

    def rules(self, severity: str) -> list[str]:
        """The rules found at ``severity``, sorted."""
        return sorted({f.rule for f in self.findings if f.severity == severity})

    def missing_consents(self, allowed: set[str] | frozenset[str]) -> list[str]:
        """The consent rules found that ``allowed`` does not cover."""
        return [r for r in self.rules(CONSENT) if r not in allowed]

    def render(self, limit: int = 40) -> str:
        """The report as text, one finding a line, the worst first."""
        if not self.findings:
            return f"scan: {self.files} files, nothing to report"
        order = {CRITICAL: 0, CONSENT: 1, INFO: 2}
        items = sorted(self.findings, key=lambda f: (order[f.severity], f.rule, f.path, f.line))
        lines = [f"scan: {self.files} files, {len(items)} finding(s)"]
        for f in items[:limit]:
            where = f"{f.path}:{f.line}" if f.line else f.path
            lines.append(f"  {f.severity:<8} {f.rule:<28} {where}  {f.detail}")
        if len(items) > limit:
            lines.append(f"  ... and {len(items) - limit} more (see scan.json)")
        return "\n".join(lines)


def _finding(rule: str, path: str, line: int = 0, detail: str = "") -> Finding:
    severity, what = RULES[rule]
    return Finding(rule=rule, severity=severity, path=path, line=line, detail=detail or what)


def scan_tree(root: Path) -> ScanReport:
    """Scan the staged tree at ``root``."""
    findings: list[Finding] = []
    files = 0
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        for name in [*sorted(filenames), *links]:
            path = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            files += 1
            if path.is_symlink():
                target = os.path.realpath(path)
                if os.path.commonpath([real_root, target]) != real_root:
                    findings.append(_finding("unsafe-path", rel, detail=f"links to {target}"))
                continue
            findings.extend(_scan_file(path, rel, rel_dir))
        for d in dirnames:
            if d in PLATFORM_PACKAGES and rel_dir.as_posix() in (".", "src"):
                rel = (rel_dir / d).as_posix()
                findings.append(_finding("host-dependency-override", rel, detail=f"vendors '{d}'"))
    findings.extend(_scan_project(root))
    return ScanReport(files=files, findings=tuple(findings))


def _scan_file(path: Path, rel: str, rel_dir: Path) -> list[Finding]:
    name = path.name
    if name == "setup.py" and rel_dir.as_posix() == ".":
        return [_finding("install-time-code-execution", rel, 1, "setup.py runs at build time")]
    if name == "hatch_build.py":
        return [_finding("install-time-code-execution", rel, 1, "a hatch build hook")]
    if name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py"):
        return [_finding("startup-code", rel)]
    if name.endswith((".py", ".pyw")):
        return _scan_python(path, rel)
    if name.endswith((".pyc", ".pyo")):
        return [_finding("compiled-binary", rel, detail="Python bytecode without its source")]
    lower = name.lower()
    if lower.startswith(NATIVE_RUNTIME) and (".so" in lower or lower.endswith((".dll", ".dylib"))):
        return [_finding("bundled-native-runtime", rel, detail=f"bundles {name}")]
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    if lower.endswith(BINARY_SUFFIXES) or ".so." in lower or head.startswith(BINARY_MAGIC):
        return [_finding("compiled-binary", rel, detail=f"binary file {name}")]
    return []


def _scan_project(root: Path) -> list[Finding]:
    """Build configuration and license, from ``pyproject.toml`` (wheels: their metadata)."""
    findings: list[Finding] = []
    pyproject = root / "pyproject.toml"
    data: dict[str, Any] = {}
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}
        build = data.get("build-system", {})
        if "backend-path" in build:
            findings.append(
                _finding("install-time-code-execution", "pyproject.toml", detail="in-tree backend")
            )
        backend = build.get("build-backend")
        if backend is not None and backend not in KNOWN_BACKENDS:
            findings.append(_finding("build-backend", "pyproject.toml", detail=str(backend)))
        inline = data.get("tool", {}).get("inline", {})
        if isinstance(inline, dict) and inline.get("network") is True:
            findings.append(_finding("sandbox-network", "pyproject.toml", detail="network = true"))
        hatch = data.get("tool", {}).get("hatch", {})
        if _has_custom_hook(hatch):
            findings.append(
                _finding("install-time-code-execution", "pyproject.toml", detail="hatch hook")
            )
        if "build" in data.get("tool", {}).get("poetry", {}):
            findings.append(
                _finding("install-time-code-execution", "pyproject.toml", detail="poetry build")
            )
    has_license_file = any(
        p.name.upper().startswith(("LICENSE", "LICENCE", "COPYING")) for p in root.rglob("*")
    )
    if not has_license_file and "license" not in data.get("project", {}):
        metadata = list(root.glob("*.dist-info/METADATA"))
        text = metadata[0].read_text(errors="replace") if metadata else ""
        if "\nLicense" not in text:
            findings.append(_finding("no-license", "pyproject.toml" if data else "."))
    return findings


def _has_custom_hook(hatch: Any) -> bool:
    if not isinstance(hatch, dict):
        return False
    for key, value in hatch.items():
        if key == "hooks" and isinstance(value, dict) and "custom" in value:
            return True
        if _has_custom_hook(value):
            return True
    return False


def _scan_python(path: Path, rel: str) -> list[Finding]:
    try:
        tree = ast.parse(path.read_bytes(), filename=rel)
    except (SyntaxError, ValueError) as exc:
        return [_finding("unparseable-source", rel, getattr(exc, "lineno", 0) or 0, str(exc))]
    visitor = _Visitor(rel)
    visitor.visit(tree)
    return visitor.findings


class _Visitor(ast.NodeVisitor):
    """Imports and calls, with import aliases resolved to dotted names."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.aliases: dict[str, str] = {}
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, int]] = set()

    def add(self, rule: str, node: ast.AST, detail: str) -> None:
        line = getattr(node, "lineno", 0)
        if (rule, line) not in self._seen:
            self._seen.add((rule, line))
            self.findings.append(_finding(rule, self.rel, line, detail))

    # imports ---------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            self._imported(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            self._imported(module, node)
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            if node.level == 0:
                self.aliases[alias.asname or alias.name] = full
                self._imported(full, node)

    def _imported(self, module: str, node: ast.AST) -> None:
        top = module.split(".")[0]
        if top in SUBPROCESS_MODULES:
            self.add("subprocess", node, f"imports {module}")
        elif top in CTYPES_MODULES:
            self.add("ctypes", node, f"imports {module}")
        elif top in SOCKET_MODULES:
            self.add("raw-socket", node, f"imports {module}")
        elif module in NETWORK_MODULES or top in NETWORK_MODULES:
            self.add("network-egress", node, f"imports {module}")
        elif top in DOWNLOAD_MODULES:
            self.add("model-download", node, f"imports {module}")
        elif top == "marshal":
            self.add("obfuscated-execution", node, "imports marshal (loads code objects)")

    # calls --------------------------------------------------------------------------------
    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func) or ""
        if name in EXEC_CALLS:
            if any(self._decodes(arg) for arg in node.args):
                self.add("obfuscated-execution", node, f"{name}() of decoded data")
            else:
                self.add("dynamic-execution", node, f"calls {name}()")
        elif name in ("__import__", "importlib.import_module", "importlib.__import__") or (
            name.startswith("runpy.")
        ):
            literal = node.args and isinstance(node.args[0], ast.Constant)
            if not literal or name.startswith("runpy."):
                self.add("dynamic-execution", node, f"calls {name}() with a computed name")
        elif (
            name.startswith(("subprocess.", "pty."))
            or name in SUBPROCESS_CALLS
            or (name.startswith(("os.spawn", "os.exec")))
        ):
            self.add("subprocess", node, f"calls {name}()")
        elif name in NETWORK_CALLS:
            self.add("network-egress", node, f"calls {name}()")
        elif name in PICKLE_CALLS or name.endswith(".Unpickler"):
            self.add("pickle-deserialization", node, f"calls {name}()")
        elif name in ("torch.load",) and not _keyword_true(node, "weights_only"):
            self.add("pickle-deserialization", node, "torch.load without weights_only=True")
        elif name in ("numpy.load", "np.load") and _keyword_true(node, "allow_pickle"):
            self.add("pickle-deserialization", node, "numpy.load(allow_pickle=True)")
        elif name == "marshal.loads":
            self.add("obfuscated-execution", node, "marshal.loads")
        elif name.split(".")[-1] in ("hf_hub_download", "snapshot_download"):
            self.add("model-download", node, f"calls {name}()")
        self.generic_visit(node)

    def _decodes(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = self.dotted(sub.func) or ""
                last = name.split(".")[-1]
                if name in DECODERS or last in ("b64decode", "decompress", "fromhex"):
                    return True
        return False


def _keyword_true(node: ast.Call, key: str) -> bool:
    return any(
        kw.arg == key and isinstance(kw.value, ast.Constant) and kw.value.value is True
        for kw in node.keywords
    )
