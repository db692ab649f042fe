"""`cri-resmgr status` and the relay's `/state`: what the relay decided, for an operator.

`endpoint` is the relay's side (the engine's snapshot as JSON, taken on the event loop);
`view` turns that JSON into who holds each CPU; `text` and `svg` draw it; `command` is
the command line. The drawing works from the JSON alone, so it can run anywhere the
document is (a copy attached to a bug ticket renders the same).
"""
