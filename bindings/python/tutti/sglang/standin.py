# SPDX-License-Identifier: Apache-2.0
"""What TuttiHiCacheStorage needs of SGLang's HiCacheStorage, for when SGLang is not installed.

With SGLang importable, TuttiHiCacheStorage derives from SGLang's own HiCacheStorage and
HiCacheStorageConfig is SGLang's; none of this is used. Without it (tutti's CI, a machine that
only replays SGLang's calls), these stand in with the same names, fields and base behaviour.
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


@dataclass
class StorageMetrics:  # sglang.srt.metrics.collector's: what get_stats hands the collector
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


class HiCacheStorage:
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None
