"""One rank of the worker group (``python -m torch.distributed.run ... -m
inline_primitives.runtime._rank``): load the transformer, put the sequence split on it, then
serve calls from rank 0's connection until told to stop or the connection ends (see
``_parallel``).

The split: on CUDA with xfuser installed (the primitives pack's ``parallel`` extra), xfuser's
Z-Image wrapper and its long-context attention; everywhere else (CPU ranks on gloo, CUDA ranks
without xfuser on NCCL) diffusers' context parallelism placed by ``_ulysses``. Every collective
moves tensors on the group's device: CPU tensors on gloo, CUDA tensors on NCCL, never a mix.
"""

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


def _xfuser_split(module: Any, plan: str, rank: int, world: int) -> bool:
    """Sequence-parallel attention through xfuser (CUDA only: it refuses to start without an
    accelerator); False where it is not installed, so the diffusers split runs instead."""
    try:
        from xfuser.core.distributed import init_distributed_environment, initialize_model_parallel
        from xfuser.model_executor.models.transformers.transformer_z_image import (
            xFuserZImageTransformer2DWrapper,
            xFuserZSingleStreamAttnProcessor,
        )
    except Exception as exc:  # not installed, or a version without the Z-Image wrapper
        log.info("xfuser unavailable (%s): the diffusers sequence split runs", exc)
        return False
    from ._ulysses import parse_degrees

    d = parse_degrees(plan)
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


def _raise(exc: BaseException) -> None:
    raise exc


def _connect() -> Any:
    host, _, port = os.environ["INLINE_GROUP_ADDRESS"].rpartition(":")
    key = bytes.fromhex(os.environ.pop("INLINE_GROUP_KEY"))
    return Client((host, int(port)), authkey=key)


def main() -> int:
    import torch
    import torch.distributed as dist

    from .._families import detect
    from .._loading import Placement, ensure_imports, load_placed
    from .._lora import as_stack, use_loras
    from .._sampling import sample
    from .._text import Conditioning
    from ._attention import attention_on
    from ._compile import CompiledTransformer, compile_mode
    from ._parallel import recv, send
    from ._ulysses import TokenProbe, each_rank_split, enable_sequence_split

    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s [rank] %(message)s")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(os.environ["INLINE_GROUP_DEVICES"].split(",")[rank])
    plan = os.environ["INLINE_GROUP_PLAN"]
    model_file = os.environ["INLINE_GROUP_MODEL"]
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    ensure_imports()
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    module = load_placed(detect(Path(model_file), "diffusion"), Placement(str(device), dtype))
    module._inline_attention = os.environ.get("INLINE_GROUP_ATTENTION", "sdpa")
    probe = TokenProbe()
    probe.install(module)
    conn = _connect() if rank == 0 else None
    try:
        how = "xfuser" if device.type == "cuda" and _xfuser_split(module, plan, rank, world) else ""
        if not how:
            enable_sequence_split(module, plan, device)
            how = "diffusers"
    except Exception as exc:  # a plan this group cannot split by: said once, the group ends
        if conn is not None:
            send(conn, ("failed", f"{type(exc).__name__}: {exc}"))
        dist.destroy_process_group()
        return 2
    mode = compile_mode(device, model_file)
    model: Any = module if mode == "eager" else CompiledTransformer(module, mode)
    # torchrun starts each rank in a session of its own: rank 0 hands every pid up, so the
    # pack worker can take the whole group down
    pids: list[Any] = [None] * world
    dist.all_gather_object(pids, os.getpid())
    if conn is not None:
        info = {
            "split": True,
            "splitBy": how,
            "backend": dist.get_backend(),
            "world": world,
            "pids": pids,
            "compile": mode,
        }
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
        flag = torch.zeros(1, device=device)

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
            # the call's LoRA stack (or none: a previous call's is taken off), on every rank
            use_loras(module, model_file, as_stack(req.get("loras")))
            with attention_on(module, device):
                out = sample(
                    model, pos, neg, req["latent"],
                    steps=req["steps"], guidance=req["guidance"], sampler=req["sampler"],
                    scheduler=req["scheduler"], seed=req["seed"], denoise=req["denoise"],
                    shift=req["shift"], on_step=on_step,
                )  # fmt: skip
        except KeyboardInterrupt:
            probe.take()
            if conn is not None:
                send(conn, ("cancelled",))
            continue
        except Exception as exc:  # the call fails; the group stays up if every rank is there
            probe.take()
            if isinstance(exc, dist.DistError):  # a collective of the split lost a peer
                _collective(_raise, exc)
            _collective(dist.barrier)  # a lost peer ends the group here, never a call error
            if conn is not None:
                send(conn, ("error", f"{type(exc).__name__}: {exc}"))
            continue
        # every rank checks it holds the same result, on the group's device
        out = out.float()
        ref = out.clone()
        _collective(dist.broadcast, ref, src=0)
        diff = (out - ref).abs().max().reshape(1)
        _collective(dist.all_reduce, diff, op=dist.ReduceOp.MAX)
        tokens: list[Any] = [None] * world
        _collective(dist.all_gather_object, tokens, probe.take())
        if conn is not None:
            report = {"ranksAgree": float(diff.item()) == 0.0, "tokens": tokens}
            report["split"] = each_rank_split(tokens)
            send(conn, ("done", out.cpu(), report))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
