# SPDX-License-Identifier: Apache-2.0
"""What TuttiConnector needs of vLLM's KV connector base, for when vLLM is not installed.

With vLLM importable, TuttiConnector derives from vLLM's own KVConnectorBase_V1 and none of
this is used. Without it (tutti's CI, a machine that only replays vLLM's calls), these classes
stand in with the same names and the behaviour of the base methods TuttiConnector inherits.
"""
import enum
from dataclasses import dataclass
from typing import Any, Optional


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    """Scheduler to worker, once per step."""


class KVConnectorStats:
    def __init__(self, data: Optional[dict] = None):
        self.data = data if data is not None else {}


class KVConnectorBase_V1:
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None):
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)
        if self._kv_transfer_config is None:
            raise ValueError("vllm_config.kv_transfer_config is not set")
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None


class KVConnectorKVEvents:
    """The container of KV events a worker hands its scheduler."""


@dataclass
class BlockStored:
    block_hashes: list
    parent_block_hash: Any
    token_ids: list
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


@dataclass
class BlockRemoved:
    block_hashes: list
    medium: Optional[str]
