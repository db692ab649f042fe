"""Resource policies: decision modules with no I/O, listed in an explicit registry."""
