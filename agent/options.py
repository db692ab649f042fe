"""The agent's settings, with the defaults the deployment files rely on."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_AGENT_SOCKET = "/var/run/cri-resmgr/cri-resmgr-agent.sock"
DEFAULT_CONFIG_SOCKET = "/var/run/cri-resmgr/cri-resmgr-config.sock"
DEFAULT_HEALTH_ADDRESS = "127.0.0.1:8891"


@dataclass(frozen=True)
class AgentOptions:
    node_name: str
    kubeconfig: str | None = None
    config_namespace: str = "kube-system"
    configmap_name: str = "cri-resmgr-config"
    label_name: str = "cri-resource-manager.intel.com/group"
    agent_socket: str = DEFAULT_AGENT_SOCKET
    config_socket: str = DEFAULT_CONFIG_SOCKET
    # host:port of the /readyz and /healthz endpoints; "" disables them.
    health_address: str = DEFAULT_HEALTH_ADDRESS
    # Server-side watch duration; a watch is re-established from its last version after it.
    watch_timeout_seconds: int = 300
    # Retry delays after a failed API or relay call: doubling from min to max.
    backoff_min_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    request_timeout_seconds: float = 30.0
