"""cri-resmgr-webhook: a mutating admission webhook that copies each new pod's
container requests and limits into the annotation intel.com/resources."""
