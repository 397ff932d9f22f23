# SPDX-License-Identifier: Apache-2.0
"""tutti as a KV connector of vLLM (V1 API).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "TuttiConnector",
        "kv_connector_module_path": "tutti.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"pool": "/nvme/kv.pool", "capacity": "512G"}}'

kv_connector_extra_config holds tutti options (tutti.h: pool, capacity, backend,
chunk_tokens, ...) and the connector's own keys (load_async, lease_ttl_ms): see
tutti.vllm.connector and docs/vllm.md.
"""
from .connector import HAVE_VLLM, LoadSpec, SaveSpec, TuttiConnector, TuttiConnectorMetadata, TuttiConnectorStats

__all__ = ["TuttiConnector", "TuttiConnectorMetadata", "TuttiConnectorStats", "LoadSpec", "SaveSpec", "HAVE_VLLM"]
