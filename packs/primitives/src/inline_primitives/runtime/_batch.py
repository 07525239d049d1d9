"""Cross-request batching: compatible sample calls of different runs denoised as one batch.

Compatible means the same loaded weights (one batcher per transformer), the same latent shape and
the same steps, start step (denoise strength), sampler, scheduler, guidance and shift. Each item
keeps its own generator (seeded noise, stochastic steps), its own scheduler state, conditioning,
progress, previews, result and cancellation: a cancelled item leaves the batch and the others go
on. The step is ``_sampling.sample``'s, item for item, so an item's output equals the same
request run alone (to float rounding of the batched matmuls).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from inline_sdk import Cancelled, WorkerStats

from .._sampling import make_scheduler
from ._attention import attention_on
from ._denoise import DenoiseRequest, LocalDenoiser
from ._gather import BatchStats, Gatherer, Job
from ._settings import batch_window_s, max_batch

log = logging.getLogger("inline.runtime.batch")
#: How much of the free memory a batch's activations may take.
ROOM_SHARE = 0.8


def _free_bytes(device: Any) -> int | None:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_limit(device: Any, request: DenoiseRequest) -> int:
    """How many items of this size the memory leaves room for (the policy's activation
    estimate per image, fp32 on the CPU)."""
    from .._runtime import activation_bytes

    b, _, h, w = request.latent.shape
    per = activation_bytes(w * 8, h * 8, batch=b, cfg=request.guidance > 0)
    if device.type != "cuda":
        per *= 2  # fp32
    free = _free_bytes(device)
    if free is None or per <= 0:
        return 1 << 30
    return max(1, int(free * ROOM_SHARE) // per)


@dataclass(eq=False)
class _Item:
    job: Job[DenoiseRequest]
    sched: Any
    gen: Any
    x: Any
    pos: list[Any]
    neg: list[Any] | None
    live: bool = True

    @property
    def request(self) -> DenoiseRequest:
        return self.job.request


class BatchedDenoiser:
    """Gathers concurrent requests for one transformer and denoises them together."""

    def __init__(
        self,
        transformer: Any,
        *,
        limit: int | None = None,
        window_s: float | None = None,
        stats: WorkerStats | None = None,
        section: str = "batching",
    ) -> None:
        from .._loading import execution_device

        self.transformer = transformer
        self.local = LocalDenoiser(transformer)
        self.device = execution_device(transformer)
        self.limit = max_batch() if limit is None else max(1, limit)
        self.window_s = batch_window_s() if window_s is None else window_s
        self._stats = stats
        self._section = section
        self.gatherer: Gatherer[DenoiseRequest] = Gatherer(
            self.run_batch,
            self.local.denoise,
            key=lambda r: r.key(),
            limit=lambda r: min(self.limit, memory_limit(self.device, r)),
            window_s=self.window_s,
            on_batch=self._report,
        )

    def _report(self, s: BatchStats) -> None:
        if self._stats is not None:
            values = s.as_dict()
            values.update(maxBatch=self.limit, windowMs=round(self.window_s * 1000, 3))
            self._stats.update(self._section, values)

    def denoise(self, request: DenoiseRequest) -> Any:
        if request.cancelled():
            raise Cancelled()
        return self.gatherer.submit(request)

    # the batched loop ----------------------------------------------------------------------
    def _prepare(self, job: Job[DenoiseRequest]) -> tuple[_Item | None, Any]:
        """An item's own scheduler, generator and starting latents (as ``sample`` makes them)."""
        import torch

        r = job.request
        device, dtype = self.device, self.transformer.dtype
        steps = max(1, int(r.steps))
        sched = make_scheduler(r.sampler, r.scheduler, r.shift)
        gen = torch.Generator("cpu").manual_seed(int(r.seed))
        latent = r.latent.to(device=device, dtype=torch.float32)
        noise = torch.randn(latent.shape, generator=gen, dtype=torch.float32).to(device)
        sched.set_timesteps(sigmas=torch.linspace(1.0, 1 / steps, steps).tolist(), device=device)
        start = r.start()
        timesteps = sched.timesteps[start:]
        sched.set_begin_index(start)
        if len(timesteps) == 0:
            job.succeed(latent)
            return None, timesteps
        if start == 0 and not bool(latent.any()):
            x = noise
        else:
            sigma = sched.sigmas[start]
            x = sigma * noise + (1.0 - sigma) * latent
        n = x.shape[0]
        pos = _per_item(r.positive.embeds, n, device, dtype)
        neg = None
        if r.guidance > 0:
            neg = _per_item((r.negative or r.positive.zeroed()).embeds, n, device, dtype)
        return _Item(job, sched, gen, x, pos, neg), timesteps

    def run_batch(self, jobs: list[Job[DenoiseRequest]]) -> None:
        """Denoise ``jobs`` (one compatible group) as one batch; each job gets its result."""
        import torch

        items: list[_Item] = []
        timesteps: Any = None
        if jobs:  # one stack per batch (it is part of the key): the weights for all of them
            jobs[0].request.use_weights()
        for job in jobs:
            item, ts = self._prepare(job)
            if item is not None:
                items.append(item)
                timesteps = ts
        if not items:
            return
        guidance = float(items[0].request.guidance)
        dtype = self.transformer.dtype
        total = len(timesteps)
        with torch.no_grad(), attention_on(self.transformer, self.device):
            for i, t in enumerate(timesteps):
                for it in items:
                    if it.live and it.request.cancelled():
                        it.live = False
                        it.job.fail(Cancelled())
                live = [it for it in items if it.live]
                if not live:
                    return
                x = torch.cat([it.x for it in live])
                batch = x.shape[0]
                timestep = (1000 - t.expand(batch)) / 1000
                pos = [e for it in live for e in it.pos]
                if guidance > 0:
                    neg = [e for it in live for e in (it.neg or [])]
                    model_in = x.to(dtype).repeat(2, 1, 1, 1)
                    caps, ts = pos + neg, timestep.repeat(2)
                else:
                    model_in, caps, ts = x.to(dtype), pos, timestep
                out = self.transformer(
                    list(model_in.unsqueeze(2).unbind(dim=0)), ts, caps, return_dict=False
                )[0]
                if guidance > 0:
                    pred = torch.stack(
                        [
                            out[j].float() + guidance * (out[j].float() - out[batch + j].float())
                            for j in range(batch)
                        ]
                    )
                else:
                    pred = torch.stack([o.float() for o in out])
                pred = -pred.squeeze(2)
                row = 0
                for it in live:
                    n = it.x.shape[0]
                    mine = pred[row : row + n].to(torch.float32)
                    row += n
                    it.x = it.sched.step(mine, t, it.x, return_dict=False, generator=it.gen)[0]
                    self._stepped(it, i + 1, total)
        for it in items:
            if it.live:
                it.job.succeed(it.x)

    def _stepped(self, it: _Item, i: int, total: int) -> None:
        """The item's progress and preview; its own error (cancel) ends it alone."""
        if it.request.on_step is None:
            return
        try:
            it.request.on_step(i, total, it.x)
        except BaseException as exc:  # the item's callback stopped it: the others go on
            it.live = False
            it.job.fail(exc)


def _per_item(embeds: list[Any], batch: int, device: Any, dtype: Any) -> list[Any]:
    items = [e.to(device=device, dtype=dtype) for e in embeds]
    if len(items) == batch:
        return items
    if len(items) == 1:
        return items * batch
    raise ValueError(f"{len(items)} prompts for a batch of {batch} latents")
