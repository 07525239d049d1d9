"""``text/embed`` through the server (``POST /openai/v1/embeddings``) vs plain transformers in
one process, on the same small random encoder (``_embed_direct.py``: all-MiniLM-L6-v2's shape,
a sentence-transformers folder: mean pooling, normalised).

Ours goes through the real server: an OpenAI request -> a durable run -> the text pack's worker
-> the node's batcher -> the vectors as a take -> the JSON answer, read by one ``httpx.Client``
made before the clock starts. The baseline is the folder's tokenizer and ``AutoModel`` with
the same pooling in one warm process, the vectors made into Python lists as a server would.
Both sides run torch on one intra-op thread (``OMP_NUM_THREADS=1``, the worker inherits it):
on this shared 2-core machine two processes of two spinning OpenMP threads each starve each
other. Every request has new texts, so the output cache never answers.

- ``ratio``: embeddings/s of ROUNDS x REQUESTS sequential requests of BIG texts each, ours over
  the baseline's on the same batches (median of the rounds' ratios; target >= 0.9);
- ``batched_ratio``: embeddings/s of CLIENTS clients sending one-text requests at once (a search
  box's queries) over the same requests sent one after another, both through the server
  (target >= 1.5): the node gathers the requests that arrive while the encoder runs into one
  batch. ``batched_ratio_4_texts`` is the same with 4 texts a request: there the one-thread
  encoder is already near its ceiling alone (the baseline's rate), so gathering gains less.

Writes bench/results/embed.json.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import ROOT, median, write_result
from _embed_direct import WORDS

ROUNDS = 5
REQUESTS = 8  # per round, sequential
BIG = 64  # texts per request for ``ratio``
SMALL = (1, 4)  # texts per request for ``batched_ratio`` (and ``batched_ratio_4_texts``)
CLIENTS = 8
PER_CLIENT = 6  # requests each client sends for ``batched_ratio``
THREADS = 1
MODEL = "minilm-random"
QUIET = {"TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1", "HF_HUB_OFFLINE": "1",
         "OMP_NUM_THREADS": str(THREADS), "TRANSFORMERS_VERBOSITY": "error"}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Texts:
    """New sentences of 12 to 28 words each (a counter in each: never the same text twice)."""

    def __init__(self) -> None:
        self.rng, self.n = random.Random(7), 0

    def take(self, k: int) -> list[str]:
        out = []
        for _ in range(k):
            self.n += 1
            words = self.rng.choices(WORDS, k=self.rng.randint(12, 28))
            out.append(f"{' '.join(words)} {self.n}")
        return out


def embed(client: httpx.Client, url: str, texts: list[str]) -> float:
    started = time.perf_counter()
    r = client.post(url + "/openai/v1/embeddings", json={"model": MODEL, "input": texts})
    r.raise_for_status()
    assert len(r.json()["data"]) == len(texts)
    return time.perf_counter() - started


def concurrent(url: str, batches: list[list[list[str]]]) -> float:
    """Seconds for CLIENTS threads, each with its own connection, to send their batches."""
    clients = [httpx.Client(timeout=300) for _ in batches]
    barrier = threading.Barrier(len(batches) + 1)
    errors: list[BaseException] = []

    def work(client: httpx.Client, mine: list[list[str]]) -> None:
        barrier.wait()
        try:
            for texts in mine:
                embed(client, url, texts)
        except BaseException as exc:
            errors.append(exc)

    pairs = zip(clients, batches, strict=True)
    threads = [threading.Thread(target=work, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for c in clients:
        c.close()
    if errors:
        raise errors[0]
    return elapsed


def wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while True:  # polling a starting process
        try:
            if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.1)


def main() -> None:
    from inline_registry import load_registry, prepare_env

    (ROOT / ".inline").mkdir(exist_ok=True)  # not /tmp: a sandboxed worker gets its own /tmp
    with tempfile.TemporaryDirectory(prefix="bench-embed-", dir=ROOT / ".inline") as tmp:
        data = Path(tmp)
        python = prepare_env(load_registry(data / "packs").packs["text"].env).python
        env = {**os.environ, **QUIET}
        folder = data / "models" / "embeddings" / MODEL
        folder.mkdir(parents=True)
        direct = str(ROOT / "bench" / "_embed_direct.py")
        subprocess.run([str(python), direct, "build", str(folder)], check=True, env=env,
                       capture_output=True)  # fmt: skip
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "inline_host"],
            env={**env, "INLINE_DATA_DIR": str(data), "INLINE_MODELS_DIR": str(data / "models"),
                 "INLINE_PORT": str(port), "INLINE_HOST": "127.0.0.1"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data,
        )  # fmt: skip
        baseline = subprocess.Popen(
            [str(python), direct, "serve", str(folder)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert baseline.stdin is not None and baseline.stdout is not None
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(timeout=300)
        texts = Texts()

        def direct_s(batch: list[str]) -> float:
            assert baseline.stdin is not None and baseline.stdout is not None
            baseline.stdin.write(json.dumps(batch) + "\n")
            baseline.stdin.flush()
            return float(json.loads(baseline.stdout.readline())["s"])

        try:
            wait_healthy(url, server)
            json.loads(baseline.stdout.readline())
            for _ in range(2):  # warm both up (worker start, model load, first shapes)
                embed(client, url, texts.take(BIG))
                direct_s(texts.take(BIG))
            ratios, ours_rates, base_rates = [], [], []
            for _ in range(ROUNDS):  # the same batches on both sides, alternately
                mine = theirs = 0.0
                for _ in range(REQUESTS):
                    batch = texts.take(BIG)
                    mine += embed(client, url, batch)
                    theirs += direct_s(batch)
                n = REQUESTS * BIG
                ours_rates.append(n / mine)
                base_rates.append(n / theirs)
                ratios.append(theirs / mine)
            # many small requests: one after another, then CLIENTS at once (the same sizes)
            seq_rates: dict[int, list[float]] = {k: [] for k in SMALL}
            conc_rates: dict[int, list[float]] = {k: [] for k in SMALL}
            for _ in range(3):
                for k in SMALL:
                    n = CLIENTS * PER_CLIENT * k
                    work = [[texts.take(k) for _ in range(PER_CLIENT)] for _ in range(CLIENTS)]
                    started = time.perf_counter()
                    for mine_batches in work:
                        for batch in mine_batches:
                            embed(client, url, batch)
                    seq_rates[k].append(n / (time.perf_counter() - started))
                    work = [[texts.take(k) for _ in range(PER_CLIENT)] for _ in range(CLIENTS)]
                    conc_rates[k].append(n / concurrent(url, work))
            health = client.get(url + "/v1/health").json()
            batching = health["workers"]["text"]["runtime"].get("embedBatching", {})
        finally:
            client.close()
            server.terminate()
            server.wait(timeout=30)
            baseline.stdin.close()
            baseline.wait(timeout=30)
    write_result(
        "embed",
        {
            "embeddings_per_s": round(median(ours_rates), 1),
            "baseline_embeddings_per_s": round(median(base_rates), 1),
            "ratio": round(median(ratios), 3),
            "sequential_one_text_per_s": round(median(seq_rates[1]), 1),
            "concurrent_one_text_per_s": round(median(conc_rates[1]), 1),
            "batched_ratio": round(median(conc_rates[1]) / median(seq_rates[1]), 3),
            "batched_ratio_4_texts": round(median(conc_rates[4]) / median(seq_rates[4]), 3),
            "texts_per_request": BIG,
            "clients": CLIENTS,
            "rounds": ROUNDS,
            "threads": THREADS,
            "model": "random BERT, 6 layers x 384 (all-MiniLM-L6-v2's shape)",
            "batches": batching,
        },
    )


if __name__ == "__main__":
    main()
