# SPDX-License-Identifier: Apache-2.0
"""A replay of vLLM's engine around a KV connector: its scheduler's and model runner's calls,
in vLLM's order, over a real paged KV cache in one of vLLM's layouts (vLLM itself cannot be
installed here; docs/vllm.md lists which vLLM code this follows).

The scheduler (vllm/v1/core/sched/scheduler.py) runs requests first, then waiting ones: for a
request with nothing computed, vLLM's own prefix cache (whole blocks, at most num_tokens - 1)
and then get_num_new_matched_tokens; allocation (preempting the newest running request when
blocks run out); update_state_after_alloc; async loads park the request until the worker
reports it in finished_recving. build_connector_meta closes every step. After the step,
invalid blocks truncate num_computed_tokens (the step's sample of that request is dropped),
finished_recving wakes parked requests, and finished requests go through request_finished.

The model runner (KVConnectorModelRunnerMixin) calls handle_preemptions, bind, start_load_kv,
then per layer wait_for_layer_load, attention, save_kv_layer; then wait_for_save,
get_finished, get_block_ids_with_load_errors, get_kv_connector_stats,
get_kv_connector_kv_cache_events and clear; the scheduler's update_from_output hands the events
to update_connector_output and publishes what take_events yields. With
late_start (the newest vLLM), a step without sync loads calls start_load_kv only after the
forward.

The "model" gives position p of a prompt a KV that depends on every token up to p (a chained
hash), as a transformer's does. Its attention reads the KV of every computed position of each
scheduled request and checks it against the hash: a position that is wrong must lie in or
after a block the connector reported as failed in that step (vLLM then recomputes it), and
anything computed over wrong KV is written poisoned, so a connector that saved it would hand
it back wrong later and be caught.
"""
import time
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import torch

from tutti.vllm import TuttiConnector
from tutti.vllm.connector import KVConnectorRole  # vLLM's own when it is installed

WAITING, RUNNING, PREEMPTED, PARKED, FINISHED = "WAITING", "RUNNING", "PREEMPTED", "WAITING_FOR_REMOTE_KVS", "FINISHED"


class WrongKV(AssertionError):
    pass


def vllm_config(block_size: int, extra: dict, head_dim: int, kv_role: str = "kv_both"):
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector="TuttiConnector", kv_connector_module_path="tutti.vllm",
                                           kv_role=kv_role, kv_connector_extra_config=dict(extra)),
        cache_config=SimpleNamespace(block_size=block_size, cache_dtype="auto"),
        model_config=SimpleNamespace(model="replay-llama", revision=None, dtype="float16",
                                     get_head_size=lambda: head_dim))


@dataclass
class Request:
    request_id: str
    prompt_token_ids: List[int]
    max_tokens: int = 2
    cache_salt: Optional[str] = None
    lora_request: None = None
    output_token_ids: List[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_external_computed_tokens: int = 0
    num_preemptions: int = 0
    status: str = WAITING
    blocks: List[int] = field(default_factory=list)
    aborted: bool = False
    mm_features: list = field(default_factory=list)  # media in the prompt
    skip_reading_prefix_cache: bool = False  # prompt logprobs: every position is computed

    @property
    def all_token_ids(self) -> List[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)


class KVCacheBlocks:
    def __init__(self, ids: List[int]):
        self._ids = list(ids)

    def get_block_ids(self):
        return (list(self._ids),)


# ---- the KV a position must hold ------------------------------------------------------------

def chain(tokens: List[int]) -> List[int]:
    """h[p] depends on tokens[0..p]."""
    h, out = 17, []
    for t in tokens:
        h = (h * 1000003 + t + 1) % (1 << 31)
        out.append(h)
    return out


def expected_kv(hashes: torch.Tensor, layer: int, side: int, heads: int, dim: int) -> torch.Tensor:
    """[n, heads, dim] small integers (exact in float16) from each position's hash."""
    mix = (torch.arange(heads)[:, None] * 5 + torch.arange(dim)[None, :] + layer * 7 + side * 3)
    shift = mix % 13
    return (((hashes[:, None, None] >> shift) ^ mix) % 1021).to(torch.float16)


# ---- the paged KV cache in vLLM's layouts ---------------------------------------------------

LAYOUTS = ("2BNHD", "2BHND", "B2NHD", "BHNC", "MLA")


def allocate(kind: str, layers: int, blocks: int, bt: int, heads: int, dim: int, device: str):
    """{layer name: tensor as vLLM hands it to register_kv_caches}, and per layer the K and V
    views [blocks, bt, heads, dim] the model reads and writes (worked out here on its own,
    not with the connector's code)."""
    caches, views = {}, []
    z = dict(dtype=torch.float16, device=device)
    shared = torch.zeros(blocks, layers, heads, bt, 2 * dim, **z) if kind == "BHNC" else None
    for layer in range(layers):
        name = f"model.layers.{layer}.self_attn.attn"
        if kind == "2BNHD":
            t = torch.zeros(2, blocks, bt, heads, dim, **z)
            k, v = t[0], t[1]
        elif kind == "2BHND":  # vLLM's HND: the logical shape of NHD over an HND allocation
            t = torch.zeros(2, blocks, heads, bt, dim, **z).permute(0, 1, 3, 2, 4)
            k, v = t[0], t[1]
        elif kind == "B2NHD":
            t = torch.zeros(blocks, 2, bt, heads, dim, **z)
            k, v = t[:, 0], t[:, 1]
        elif kind == "MLA":  # one latent of heads * dim per token, no V; the model sees it as heads x dim
            t = torch.zeros(blocks, bt, heads * dim, **z)
            k, v = t.view(blocks, bt, heads, dim), None
        else:  # one buffer for all layers (BLHNC), each layer a strided [blocks, heads, bt, 2*dim] view
            t = shared[:, layer]
            k, v = t[..., :dim].transpose(1, 2), t[..., dim:].transpose(1, 2)
        caches[name] = t
        views.append((k, v))
    return caches, views


# ---- the engine -----------------------------------------------------------------------------

class Engine:
    def __init__(self, tmp_path, layout: str = "2BNHD", layers: int = 3, blocks: int = 96, block_size: int = 4,
                 heads: int = 2, dim: int = 8, budget: int = 64, max_running: int = 4, local_cache: bool = True,
                 device: str = "cpu", kv_role: str = "kv_both", late_start: bool = False,
                 cache_at_alloc: bool = False, defer_finalize: bool = False, publish_events: bool = False,
                 drafter_layers: int = 0, **extra):
        extra.setdefault("pool", str(tmp_path / "kv.pool"))
        extra.setdefault("capacity", "16M")
        self.bs, self.layers, self.heads, self.dim = block_size, layers, heads, dim
        self.budget, self.max_running, self.local_cache = budget, max_running, local_cache
        self.late_start = late_start  # newest vLLM: start_load_kv after the forward when no load is sync
        # vLLM's allocate_slots caches a request's blocks when it allocates them, before their KV
        # is loaded or computed (a request scheduled after it in the same step can share them).
        self.cache_at_alloc = cache_at_alloc
        # Speculative decoding: load errors are asked for before wait_for_save.
        self.defer_finalize = defer_finalize
        config = vllm_config(block_size, extra, dim, kv_role)
        # Speculative decoding with an EAGLE-style drafter: its attention layers get KV caches
        # too, numbered after the target's (vLLM's EAGLE heads: layers.{N + i}).
        self.drafter_layers = drafter_layers
        config.model_config.hf_config = SimpleNamespace(num_hidden_layers=layers)
        if drafter_layers:
            config.speculative_config = SimpleNamespace(method="eagle", num_speculative_tokens=2)
        # vLLM's --kv-events-config: the scheduler publishes what take_events hands it.
        config.kv_events_config = SimpleNamespace(enable_kv_cache_events=publish_events)
        self.published: list = []
        cache_config = SimpleNamespace(num_blocks=blocks)
        # vLLM: the worker's connector first (the KV cache is registered before the scheduler exists)
        self.worker = TuttiConnector(config, KVConnectorRole.WORKER, cache_config)
        caches, self.views = allocate(layout, layers + drafter_layers, blocks, block_size, heads, dim, device)
        self.names = list(caches)[:layers]  # the target model's
        self.drafter_names = list(caches)[layers:]
        self.caches = caches
        self.worker.register_kv_caches(caches)
        self.sched = TuttiConnector(config, KVConnectorRole.SCHEDULER, cache_config)
        self.free = deque(range(1, blocks))  # block 0: vLLM's null block
        self.ref = [0] * blocks
        self.cached: Dict[tuple, int] = {}  # vLLM's prefix cache: prompt head -> its last block
        self.block_key: Dict[int, tuple] = {}
        self.requests: Dict[str, Request] = {}
        self.waiting: deque = deque()
        self.running: List[Request] = []
        self.parked: Dict[str, Request] = {}
        self.finished_ids: set = set()
        self.finished: List[Request] = []
        self._known_blocks: Dict[str, int] = {}  # blocks the worker knows of, per request
        self.stats: Dict[str, int] = {}
        self.loads: List[Tuple[int, int]] = []
        self.steps = 0
        self.sending: Dict[str, Request] = {}  # finished, blocks held until finished_sending
        self.held_for_saves = 0
        self.reported_invalid = 0
        self.wrong_positions = 0

    def close(self):
        stats = self.sched.get_kv_connector_stats()  # the scheduler side's own counters
        for k, v in (stats.reduce() if stats is not None else {}).items():
            self.stats[k] = self.stats.get(k, 0) + v
        self.sched.shutdown()
        self.worker.shutdown()

    # -- blocks (vLLM's BlockPool / KVCacheManager, reduced)

    def _take(self, n: int) -> Optional[List[int]]:
        if len(self.free) < n:
            return None
        out = []
        for _ in range(n):
            b = self.free.popleft()
            key = self.block_key.pop(b, None)
            if key is not None and self.cached.get(key) == b:
                del self.cached[key]
            self.ref[b] = 1
            out.append(b)
        return out

    def _release(self, req: Request) -> None:
        for b in reversed(req.blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)
        req.blocks = []

    def _local_hit(self, req: Request) -> List[int]:
        if not self.local_cache:
            return []
        hit = []
        for i in range((req.num_tokens - 1) // self.bs):
            b = self.cached.get(tuple(req.all_token_ids[:(i + 1) * self.bs]))
            if b is None:
                break
            hit.append(b)
        return hit

    def _cache_full_blocks(self, req: Request, upto: Optional[int] = None) -> None:
        if not self.local_cache:
            return
        upto = req.num_computed_tokens if upto is None else upto
        for i in range(min(upto // self.bs, len(req.blocks))):
            key = tuple(req.all_token_ids[:(i + 1) * self.bs])
            if key not in self.cached:
                self.cached[key] = req.blocks[i]
                self.block_key[req.blocks[i]] = key

    def _grow(self, req: Request, tokens: int) -> bool:
        need = -(-tokens // self.bs) - len(req.blocks)
        if need <= 0:
            return True
        got = self._take(need)
        if got is None:
            return False
        req.blocks += got
        return True

    # -- requests

    def add(self, req: Request) -> None:
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def abort(self, rid: str) -> None:
        req = self.requests[rid]
        if req.status == FINISHED:
            return
        req.aborted = True
        if req.status == PARKED:  # vLLM keeps the blocks until the load reports in
            self.sched.request_finished(req, list(req.blocks))
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        self._finish(req)

    def _finish(self, req: Request) -> None:
        req.status = FINISHED
        self.finished_ids.add(req.request_id)
        delay, _ = self.sched.request_finished(req, list(req.blocks))
        if delay:  # the connector still reads the blocks: freed on its finished_sending
            self.sending[req.request_id] = req
            self.held_for_saves += 1
        else:
            self._release(req)
        self.finished.append(req)

    def _preempt(self) -> Request:
        victim = self.running.pop()
        self._release(victim)
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        victim.status = PREEMPTED
        self.waiting.appendleft(victim)
        return victim

    # -- one step

    def schedule(self):
        budget = self.budget
        new_reqs, cached, scheduled, preempted = [], [], {}, set()
        for req in list(self.running):
            if budget == 0 or req not in self.running:
                continue
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            while not self._grow(req, req.num_computed_tokens + n):
                victim = self._preempt()
                preempted.add(victim.request_id)
                if victim is req:
                    break
            if req not in self.running:
                continue
            scheduled[req.request_id] = n
            budget -= n
            cached.append((req, False))
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            req = self.waiting[0]
            woken = req.num_computed_tokens > 0  # its async load reported in: it keeps its blocks
            local, ext, is_async = [], 0, False
            if not woken:
                self._release(req)  # an async load that failed entirely: start over
                local = self._local_hit(req)
                ext, is_async = self.sched.get_num_new_matched_tokens(req, len(local) * self.bs)
                if ext is None:
                    break
            computed = req.num_computed_tokens if woken else len(local) * self.bs + ext
            n = 0 if is_async else min(req.num_tokens - computed, budget)
            assert is_async or n > 0, "the connector left no token to compute"
            held = req.blocks if woken else local
            avail = len(self.free) - sum(1 for b in local if self.ref[b] == 0)
            if avail < -(-(computed + n) // self.bs) - len(held):
                break
            for b in local:
                if self.ref[b] == 0:
                    self.free.remove(b)
                self.ref[b] += 1
            if not woken:
                req.blocks = list(local)
            self._grow(req, computed + n)
            if self.cache_at_alloc and not is_async:
                self._cache_full_blocks(req, min(computed + n, req.num_tokens))
            req.num_external_computed_tokens = ext
            if ext:
                self.loads.append((computed - ext, ext))  # where a load starts, and its tokens
            self.sched.update_state_after_alloc(req, KVCacheBlocks(req.blocks), ext)
            self.waiting.popleft()
            if is_async:
                req.status = PARKED
                req.num_computed_tokens = computed
                self.parked[req.request_id] = req
                continue
            resumed = req.status == PREEMPTED
            req.status, req.num_computed_tokens = RUNNING, computed
            self.running.append(req)
            scheduled[req.request_id] = n
            budget -= n
            (cached.append((req, True)) if resumed else new_reqs.append(req))
        new_blocks = []  # vLLM: the whole list for a resumed request, else the blocks added
        for r, resumed in cached:
            known = 0 if resumed else self._known_blocks.get(r.request_id, 0)
            new_blocks.append((list(r.blocks[known:]),) if resumed or len(r.blocks) > known else None)
        for r in new_reqs + [r for r, _ in cached]:
            self._known_blocks[r.request_id] = len(r.blocks)
        out = SimpleNamespace(
            scheduled_new_reqs=[SimpleNamespace(req_id=r.request_id, prompt_token_ids=list(r.prompt_token_ids),
                                                block_ids=(list(r.blocks),), num_computed_tokens=r.num_computed_tokens,
                                                lora_request=None, mm_features=list(r.mm_features))
                                for r in new_reqs],
            scheduled_cached_reqs=SimpleNamespace(
                req_ids=[r.request_id for r, _ in cached],
                resumed_req_ids={r.request_id for r, resumed in cached if resumed},
                new_block_ids=new_blocks,
                num_computed_tokens=[r.num_computed_tokens for r, _ in cached]),
            num_scheduled_tokens=scheduled, total_num_scheduled_tokens=sum(scheduled.values()),
            finished_req_ids=set(self.finished_ids), preempted_req_ids=preempted)
        self.finished_ids = set()
        out.kv_connector_metadata = self.sched.build_connector_meta(out)
        return out

    def execute(self, so):
        """The worker's step (gpu_model_runner with KVConnectorModelRunnerMixin)."""
        w = self.worker
        w.handle_preemptions(so.kv_connector_metadata)
        w.bind_connector_metadata(so.kv_connector_metadata)
        context = SimpleNamespace(attn_metadata={} if so.total_num_scheduled_tokens else None)
        late = self.late_start and not any(not x.is_async for x in so.kv_connector_metadata.loads)
        if not late:
            w.start_load_kv(context)
        work = [(r.req_id, r.num_computed_tokens) for r in so.scheduled_new_reqs]
        work += list(zip(so.scheduled_cached_reqs.req_ids, so.scheduled_cached_reqs.num_computed_tokens))
        wrong: Dict[str, int] = {}  # request -> first position its attention read wrong
        if so.total_num_scheduled_tokens:
            for layer, name in enumerate(self.names):
                w.wait_for_layer_load(name)
                for rid, start in work:
                    self._attend(layer, self.requests[rid], start, so.num_scheduled_tokens[rid], wrong)
                w.save_kv_layer(name, self.caches[name], None)
        if late:
            w.start_load_kv(context)
        if not self.defer_finalize:
            w.wait_for_save()
        sending, recving = w.get_finished(so.finished_req_ids)
        invalid = w.get_block_ids_with_load_errors()
        if so.total_num_scheduled_tokens:
            self._draft(so, work)
        if self.defer_finalize:  # finalize_kv_connector, after the drafter
            w.wait_for_save()
        stats = w.get_kv_connector_stats()
        events = w.get_kv_connector_kv_cache_events()
        w.clear_connector_metadata()
        if stats is not None:
            for k, v in stats.reduce().items():
                self.stats[k] = self.stats.get(k, 0) + v
        for rid, pos in wrong.items():  # only over KV the connector owned up to
            blocks = self.requests[rid].blocks
            if not any(b in invalid for b in blocks[:pos // self.bs + 1]):
                raise WrongKV(f"step {self.steps}: request {rid} read wrong KV at position {pos}, "
                              f"and no block up to it was reported failed (reported: {sorted(invalid)})")
        self.wrong_positions += len(wrong)
        return SimpleNamespace(finished_sending=sending, finished_recving=recving, invalid_block_ids=invalid,
                               kv_cache_events=events)

    def _draft(self, so, work) -> None:
        """The drafter's forward, after the target's: it writes its own layers' rows of the
        step's tokens. Its attention calls the connector's hooks only while the connector's
        metadata is still bound (vLLM 0.18+, which finalizes after the drafter); before, vLLM
        skipped them."""
        w = self.worker
        for i, name in enumerate(self.drafter_names):
            if self.defer_finalize:
                w.wait_for_layer_load(name)
            k, v = self.views[len(self.names) + i]
            for rid, start in work:
                req = self.requests[rid]
                for pos in range(start, start + so.num_scheduled_tokens[rid]):
                    b, slot = req.blocks[pos // self.bs], pos % self.bs
                    k[b, slot].fill_(7.0)  # not the target's KV: what it is does not matter here
                    if v is not None:
                        v[b, slot].fill_(7.0)
            if self.defer_finalize:
                w.save_kv_layer(name, self.caches[name], None)

    def _attend(self, layer: int, req: Request, start: int, n: int, wrong: Dict[str, int]) -> None:
        k, v = self.views[layer]
        bs = self.bs
        pos = torch.arange(0, start + n)
        blk = torch.tensor(req.blocks, dtype=torch.long, device=k.device)[pos // bs]
        off = (pos % bs).to(k.device)
        h = torch.tensor(chain(req.all_token_ids[:start + n]), dtype=torch.long)
        ok = True
        for side, t in ((0, k), (1, v)) if v is not None else ((0, k),):
            want = expected_kv(h[:start], layer, side, self.heads, self.dim).to(k.device)
            bad = (t[blk[:start], off[:start]] != want).flatten(1).any(1).nonzero()
            if len(bad):
                wrong[req.request_id] = min(wrong.get(req.request_id, start), int(bad[0]))
                ok = False
            new = expected_kv(h[start:], layer, side, self.heads, self.dim).to(k.device)
            t[blk[start:], off[start:]] = new if ok and req.request_id not in wrong else new + 1  # poisoned

    def update(self, so, out) -> None:
        """vLLM's update_from_output, reduced to what the connector sees."""
        self.sched.update_connector_output(out)
        self.published.extend(self.sched.take_events())
        truncated = set()
        if out.invalid_block_ids:
            self.reported_invalid += len(out.invalid_block_ids)
            for b in out.invalid_block_ids:  # never a prefix-cache hit again
                key = self.block_key.pop(b, None)
                if key is not None and self.cached.get(key) == b:
                    del self.cached[key]
            for req in self.running + list(self.parked.values()):
                for i, b in enumerate(req.blocks[:-(-req.num_computed_tokens // self.bs)]):
                    if b in out.invalid_block_ids:
                        req.num_computed_tokens = min(req.num_computed_tokens, i * self.bs)
                        truncated.add(req.request_id)
                        break
        for rid, n in so.num_scheduled_tokens.items():
            req = self.requests[rid]
            if rid in truncated or req.status != RUNNING:
                continue
            req.num_computed_tokens += n
            self._cache_full_blocks(req)
            if req.num_computed_tokens == req.num_tokens:  # sampled a token
                h = chain(req.all_token_ids)[-1]
                req.output_token_ids.append(h % 997)
                if len(req.output_token_ids) >= req.max_tokens:
                    self.running.remove(req)
                    self._finish(req)
        for rid in out.finished_sending or ():
            assert rid in self.sending, f"finished_sending names {rid}, whose blocks were not held for it"
            self._release(self.sending.pop(rid))
        for rid in out.finished_recving or ():
            req = self.parked.pop(rid)
            if req.aborted:
                req.status = FINISHED
                self.finished_ids.add(rid)
                self._release(req)
                self.finished.append(req)
                continue
            req.num_computed_tokens = min(req.num_computed_tokens, req.num_tokens - 1)
            req.status = WAITING
            self.waiting.appendleft(req)

    def step(self) -> bool:
        """One step; False when it computed nothing (every request waits for an async load)."""
        so = self.schedule()
        out = self.execute(so)
        self.update(so, out)
        self.steps += 1
        return so.total_num_scheduled_tokens > 0

    def run(self, max_steps: int = 2000, on_step=None, max_wait_s: float = 60) -> None:
        """Steps until every request finished. Steps that only wait for async loads (real steps
        take milliseconds) sleep a little and count against max_wait_s, not max_steps."""
        busy, waited = 0, 0.0
        while self.waiting or self.running or self.parked or self.sending:
            if on_step is not None:
                on_step(self)
            if self.step():
                busy += 1
            else:
                time.sleep(0.001)
                waited += 0.001
            assert busy < max_steps and waited < max_wait_s, "the engine made no progress"
