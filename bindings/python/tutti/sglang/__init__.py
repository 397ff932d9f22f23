# SPDX-License-Identifier: Apache-2.0
"""tutti as SGLang's HiCache storage backend (the tier below its host KV pool).

    python -m sglang.launch_server --model-path MODEL --page-size 64 \\
        --enable-hierarchical-cache --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "tutti",
            "module_path": "tutti.sglang", "class_name": "TuttiHiCacheStorage",
            "interface_v1": 1, "pool": "/nvme/kv.pool", "capacity": "512G"}'

The extra config holds tutti options (tutti.h: pool, capacity, backend, ...) beside SGLang's
own keys: see tutti.sglang.hicache and docs/sglang.md.
"""
from .hicache import HAVE_SGLANG, TuttiHiCacheStorage, host_views, options

__all__ = ["TuttiHiCacheStorage", "host_views", "options", "HAVE_SGLANG"]
