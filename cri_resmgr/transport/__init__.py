"""The transport layer: CRI calls from kubelet's socket to the runtime's and back.

`contract` is all the layers above may rely on (the interception table, the
dump sink, the Transport protocol); `grpcrelay` and `framerelay` are the two
transports; `methods` is the CRI method table both use; `upstream` is the gRPC
channel to the runtime (also used by the engine for calls of its own);
`sockets` is socket-path hygiene. Nothing here imports the engine, the
policies or the configuration.
"""
