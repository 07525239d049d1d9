"""One rank of the worker group (``python -m torch.distributed.run ... -m
inline_primitives.runtime._rank``): load the transformer, then serve calls from rank 0's
connection until told to stop or the connection ends (see ``_parallel``)."""

from __future__ import annotations

import logging
import os
import sys
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

log = logging.getLogger("inline.runtime.rank")

#: the exit code of a rank that lost a peer
GROUP_BROKEN = 75


def _split(module: Any, plan: str, rank: int, world: int) -> bool:
    """Sequence-parallel attention through xfuser (Ulysses / ring); False where xfuser cannot
    run (it refuses to start without an accelerator)."""
    try:
        from xfuser.core.distributed import init_distributed_environment, initialize_model_parallel
        from xfuser.model_executor.models.transformers.transformer_z_image import (
            xFuserZImageTransformer2DWrapper,
            xFuserZSingleStreamAttnProcessor,
        )
    except Exception as exc:  # ImportError, or xfuser's own refusal on a CPU-only machine
        log.info("xfuser unavailable (%s): each rank runs the whole loop", exc)
        return False
    from ._parallel import degrees

    d = degrees(plan)
    init_distributed_environment(world_size=world, rank=rank)
    initialize_model_parallel(
        sequence_parallel_degree=world,
        ulysses_degree=d.get("ulysses", 1),
        ring_degree=d.get("ring", 1),
    )
    module.__class__ = xFuserZImageTransformer2DWrapper
    for layer in module.layers + module.context_refiner + module.noise_refiner:
        layer.attention.processor = xFuserZSingleStreamAttnProcessor()
    return True


def _collective(fn: Any, /, *args: Any, **kwargs: Any) -> None:
    """A collective across the group; one that fails means a peer is gone, and a group missing a
    rank can never agree again: this rank exits, so rank 0's connection ends and the pack worker
    sees the group die (a call error would leave a broken group looking alive)."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        log.error(
            "a collective failed (%s: %s): the group is broken, rank exits", type(exc).__name__, exc
        )
        os._exit(GROUP_BROKEN)


def main() -> int:
    import torch
    import torch.distributed as dist

    from .._families import detect
    from .._loading import Placement, ensure_imports, load_placed
    from .._sampling import sample
    from .._text import Conditioning
    from ._parallel import recv, send

    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s [rank] %(message)s")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = os.environ["INLINE_GROUP_DEVICES"].split(",")[rank]
    plan = os.environ["INLINE_GROUP_PLAN"]
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    ensure_imports()
    path = Path(os.environ["INLINE_GROUP_MODEL"])
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    module = load_placed(detect(path, "diffusion"), Placement(device=device, dtype=dtype))
    split = _split(module, plan, rank, world) if device.startswith("cuda") else False
    # torchrun starts each rank in a session of its own: rank 0 hands every pid up, so the
    # pack worker can take the whole group down
    pids: list[Any] = [None] * world
    dist.all_gather_object(pids, os.getpid())
    conn = None
    if rank == 0:
        host, _, port = os.environ["INLINE_GROUP_ADDRESS"].rpartition(":")
        key = bytes.fromhex(os.environ.pop("INLINE_GROUP_KEY"))
        conn = Client((host, int(port)), authkey=key)
        info = {"split": split, "backend": dist.get_backend(), "world": world, "pids": pids}
        send(conn, ("ready", info))
    while True:
        box: list[Any] = [None]
        if conn is not None:
            try:
                box[0] = recv(conn)
            except (EOFError, OSError):  # the pack worker went away: the group goes too
                box[0] = ("shutdown",)
        _collective(dist.broadcast_object_list, box, src=0)
        msg = box[0]
        if msg[0] == "shutdown":
            break
        if msg[0] != "call":
            continue
        req = msg[1]
        flag = torch.zeros(1)

        def on_step(i: int, n: int, x: Any, flag: Any = flag) -> None:
            if conn is not None:
                stop = False
                while conn.poll(0):
                    stop = stop or recv(conn)[0] == "cancel"
                flag.fill_(1.0 if stop else 0.0)
            _collective(dist.broadcast, flag, src=0)
            if flag.item() > 0:
                raise KeyboardInterrupt  # every rank stops at the same step
            if conn is not None:
                send(conn, ("step", i, n, x.cpu()))

        pos = Conditioning(req["positive"], [""] * len(req["positive"]), "")
        neg = None if req["negative"] is None else Conditioning(req["negative"], [""], "")
        try:
            out = sample(
                module, pos, neg, req["latent"],
                steps=req["steps"], guidance=req["guidance"], sampler=req["sampler"],
                scheduler=req["scheduler"], seed=req["seed"], denoise=req["denoise"],
                shift=req["shift"], on_step=on_step,
            )  # fmt: skip
        except KeyboardInterrupt:
            if conn is not None:
                send(conn, ("cancelled",))
            continue
        except Exception as exc:  # the call fails; the group stays up
            if conn is not None:
                send(conn, ("error", f"{type(exc).__name__}: {exc}"))
            continue
        out = out.float().cpu()
        ref = out.clone()
        _collective(dist.broadcast, ref, src=0)
        diff = torch.tensor([(out - ref).abs().max().item()])
        _collective(dist.all_reduce, diff, op=dist.ReduceOp.MAX)
        if conn is not None:
            send(conn, ("done", out, float(diff.item()) == 0.0))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
