"""cri-resmgr-agent: the node agent that configures the relay from the cluster's ConfigMaps."""
